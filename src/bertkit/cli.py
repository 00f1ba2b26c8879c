"""The `bertkit` command line: argument parsing only; the work happens in the library.

Every command answers bad input with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import settings
from .errors import BertkitError

Command = Callable[[argparse.Namespace], int | None]


def cmd_tokenize(args: argparse.Namespace) -> None:
    from .tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(args.vocab)
    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    for text in texts:
        enc = tok.encode(text, args.pair, max_length=args.max_length, truncation=args.max_length is not None)
        row = {"tokens": enc.tokens, "ids": enc.ids, "token_type_ids": enc.token_type_ids}
        if args.offsets:
            row["offsets"] = [list(o) for o in enc.offsets]
        print(json.dumps(row, ensure_ascii=False))


def cmd_vocab(args: argparse.Namespace) -> None:
    from .tokenizer import Tokenizer

    skipped: list[str] = []
    tok = Tokenizer.train_from_files(args.input, args.vocab_size, on_error=args.on_error, skipped=skipped,
                                     min_frequency=args.min_frequency, lowercase=not args.cased, show_progress=True)
    if skipped:
        print(f"skipped {len(skipped)} line(s) that are not valid UTF-8, first: {skipped[0]}", file=sys.stderr)
    tok.save_pretrained(args.out)
    print(f"wrote {args.out}/vocab.txt ({tok.vocab_size} tokens, {'cased' if args.cased else 'uncased'})")


def cmd_info(args: argparse.Namespace) -> None:
    from .config import BertConfig
    from .folders import architecture_of, is_exported

    if is_exported(args.model):  # no weights to count: the config, and what the export recorded
        print(f"{args.model}: {architecture_of(args.model)}, exported (model.onnx)")
        _print_config(BertConfig.load(args.model))
        record = args.model / "export.json"
        if record.is_file():
            print("export:")
            for key, value in json.loads(record.read_text(encoding="utf-8")).items():
                print(f"  {key:30} {value}")
        return
    from .heads import load_model, parameter_counts

    model = load_model(args.model)
    print(f"{args.model}: {type(model).__name__}")
    _print_config(model.config)
    print("parameters:")
    counts = parameter_counts(model)
    for part, n in counts.items():
        print(f"  {part:30} {n:>14,}")


def _print_config(cfg: Any) -> None:
    for key, value in cfg.to_dict().items():
        if key not in ("model_type", "architectures", "label2id", "tie_word_embeddings", "position_embedding_type"):
            print(f"  {key:30} {value}")


def cmd_export(args: argparse.Namespace) -> None:
    from .export import export

    record = export(args.model, args.out, quantize=args.quantize, opset=args.opset)
    size = (args.out / "model.onnx").stat().st_size / 2**20
    print(f"wrote {args.out}/model.onnx ({size:.1f} MiB, {record['quantize'] or 'fp32'}, outputs "
          f"{', '.join(record['outputs'])}; largest difference from PyTorch {record['max_abs_diff']:.2g})")


def cmd_prepare(args: argparse.Namespace) -> None:
    from .pretraining import PrepareSettings, prepare

    meta = prepare(args.input, args.vocab, args.out, settings.load(PrepareSettings, flags=settings.given(args, PrepareSettings)))
    counts = meta.get("counts", {})
    print(f"wrote {args.out}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items() if isinstance(v, int)))


def _run_settings(cls: type, args: argparse.Namespace, run_dir: Path | None) -> Any:
    """A run's settings: its --config file (or, resuming without one, the settings the run saved), then the
    options given, then key=value overrides."""
    base = args.config
    if args.resume and base is None:
        base = settings.saved(run_dir)  # the run's own settings, with what this command line changes
    return settings.load(cls, base, args.overrides, settings.given(args, cls))


def cmd_pretrain(args: argparse.Namespace) -> None:
    from .pretrain import PretrainSettings, pretrain

    out = pretrain(_run_settings(PretrainSettings, args, args.out), args.out, resume=args.resume)
    print(f"model: {out}")


def cmd_finetune(args: argparse.Namespace) -> None:
    from .finetune import FinetuneSettings, finetune

    cfg = _run_settings(FinetuneSettings, args, args.out)
    summary = finetune(cfg, resume=args.resume)
    best = summary["best"]
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, one answer
        print(json.dumps({"best": best, **({"test": summary["test"]} if "test" in summary else {}), "model": str(Path(cfg.out) / "model")}))


def cmd_distill(args: argparse.Namespace) -> None:
    from .distillation import DistillSettings, distill

    cfg = _run_settings(DistillSettings, args, args.out)
    summary = distill(cfg, resume=args.resume)
    if int(os.environ.get("RANK", "0")) == 0:
        shown = {k: summary[k] for k in ("student", "teacher_scores", "alone") if k in summary}
        print(json.dumps({**shown, "model": str(Path(cfg.out) / "model")}))


def cmd_evaluate(args: argparse.Namespace) -> None:
    from .finetune_settings import FinetuneDataSettings
    from .predict import pipeline

    if args.data.is_dir():  # a retrieval set in BEIR's layout
        return cmd_evaluate_retrieval(args)
    reading = settings.load(FinetuneDataSettings, flags=settings.given(args, FinetuneDataSettings))
    pipe = pipeline(args.model, device=args.device, precision=args.precision, batch_size=args.batch_size)
    print(json.dumps(pipe.evaluate(args.data, **reading.read_options()), ensure_ascii=False))


def cmd_evaluate_retrieval(args: argparse.Namespace) -> None:
    from .embed import Embedder
    from .predict import pipeline
    from .retrieval import cross_encoder, evaluate_retrieval, read_beir

    data = read_beir(args.data, args.split)
    rerank = None
    if args.first_stage is not None:  # --model is the reranker
        rerank = cross_encoder(pipeline(args.model, device=args.device, precision=args.precision,
                                        batch_size=args.batch_size))
    embedder = Embedder(args.first_stage or args.model, batch_size=args.batch_size, device=args.device)
    means, per_query = evaluate_retrieval(data, embedder, args.top_k, rerank)
    if args.per_query is not None:
        from .fileio import atomic_write_text

        atomic_write_text(args.per_query, "".join(json.dumps({"query": q, **scores}) + "\n"
                                                  for q, scores in per_query.items()))
    print(json.dumps({"data": str(args.data), "split": args.split, "queries": len(per_query),
                      "documents": len(data.corpus), "first_stage": str(args.first_stage or args.model),
                      "reranked": args.top_k if rerank else None, **means}, ensure_ascii=False))


def cmd_predict(args: argparse.Namespace) -> None:
    from .predict import pipeline, predict_lines

    pipe = pipeline(args.model, device=args.device, precision=args.precision, batch_size=args.batch_size)
    jsonl = args.file is not None and args.file.suffix.lower() in (".jsonl", ".json") and not args.text
    for row in predict_lines(pipe, _texts(args), pairs=args.pair, sep=args.sep, jsonl=jsonl, words=args.words,
                             source=str(args.file or "<stdin>")):
        print(json.dumps(row, ensure_ascii=False))


def _texts(args: argparse.Namespace) -> list[str]:
    """The inputs of a command: its TEXT arguments, else the lines of --file, else of stdin."""
    if args.text:
        return list(args.text)
    if args.file:
        if not args.file.is_file():
            raise BertkitError(f"{args.file}: no such file")
        return args.file.read_text(encoding="utf-8").splitlines()
    return [line.rstrip("\n") for line in sys.stdin]


def cmd_fill_mask(args: argparse.Namespace) -> None:
    from .fillmask import FillMask

    texts = [t for t in _texts(args) if t.strip()]
    for row in FillMask(args.model, top_k=args.top_k, device=args.device)(texts):
        print(json.dumps(row, ensure_ascii=False))


def cmd_embed(args: argparse.Namespace) -> None:
    import numpy as np

    from .embed import Embedder

    texts = [t for t in _texts(args) if t.strip()]
    embedder = Embedder(args.model, pooling=args.pooling, normalize=args.normalize, batch_size=args.batch_size,
                        device=args.device)
    vectors = embedder(texts, progress=args.out is not None)
    if args.out is not None:
        from .fileio import atomic_write

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.save(f, vectors)

        atomic_write(args.out, write)
        print(f"wrote {args.out}: {vectors.shape[0]} x {vectors.shape[1]} float32 ({embedder.pooling} pooling)")
        return
    for text, vector in zip(texts, vectors, strict=True):
        print(json.dumps({"text": text, "embedding": [round(float(x), 6) for x in vector]}, ensure_ascii=False))


def cmd_attention(args: argparse.Namespace) -> None:
    from .views.attention_maps import plot_attention

    print(plot_attention(args.model, args.text, args.pair, args.out, layer=args.layer, head=args.head))


def cmd_mask(args: argparse.Namespace) -> None:
    from .views.masking import format_masking, show_masking

    shown = show_masking(args.vocab, args.text, args.pair, whole_word_masking=args.whole_word_masking, seed=args.seed,
                         epoch=args.epoch, index=args.index)
    print(json.dumps(shown, ensure_ascii=False) if args.json else format_masking(shown))


def cmd_serve(args: argparse.Namespace) -> None:
    from .server import ServeSettings, serve

    serve(settings.load(ServeSettings, flags=settings.given(args, ServeSettings)))


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import DemoSettings, demo

    given = settings.given(args, DemoSettings)
    given.setdefault("out", Path("runs") / f"demo-{given.get('lang', 'en')}")
    print(f"report: {demo(settings.load(DemoSettings, flags=given))}")


def cmd_plot(args: argparse.Namespace) -> None:
    from .demo.plots import plot_run

    print(plot_run(args.run, args.out))


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one line (exit code 2) instead of the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ---- each command's options ------------------------------------------------------------------------------
# A command whose work has typed settings (prepare, pretrain, finetune, serve, demo) takes its options from
# them: each is declared once, as a settings field (bertkit.settings.option). A command's options are added
# only when it runs (or for --help and docs/commands.md), so that `bertkit predict` never imports training.

def _demo(p: argparse.ArgumentParser) -> Command:
    from .demo import DemoSettings

    settings.add_options(p, DemoSettings)
    return cmd_demo


def _tokenize(p: argparse.ArgumentParser) -> Command:
    p.add_argument("text", nargs="*", help="texts to tokenize (default: lines of stdin)")
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt or tokenizer.json (a model or vocabulary folder)")
    p.add_argument("--pair", help="a second text, encoded as segment B")
    p.add_argument("--max-length", type=int, help="truncate to this many tokens, specials included")
    p.add_argument("--offsets", action="store_true", help="also print character offsets into the text")
    return cmd_tokenize


def _vocab(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--input", required=True, nargs="+", type=Path, help="text files or folders (.txt, .gz)")
    p.add_argument("--vocab-size", required=True, type=int, help="number of tokens, specials included")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case, strip accents)")
    p.add_argument("--min-frequency", type=int, default=2, help="minimum count of a merged piece (default 2)")
    p.add_argument("--on-error", default="stop", choices=["skip", "stop"],
                   help="a line that is not UTF-8: stop with an error naming it (default), or skip and count it")
    return cmd_vocab


def _prepare(p: argparse.ArgumentParser) -> Command:
    from .pretraining import PrepareSettings

    p.add_argument("--input", required=True, nargs="+", type=Path, help="files or folders (.txt, .gz, .jsonl)")
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt (from `bertkit vocab`)")
    p.add_argument("--out", required=True, type=Path, help="output data folder")
    settings.add_options(p, PrepareSettings)
    return cmd_prepare


def _run_options(p: argparse.ArgumentParser, resume: str, example: str) -> None:
    p.add_argument("--config", type=Path, help="settings file (.toml or .json)")
    p.add_argument("--resume", action="store_true", help=resume)
    p.add_argument("overrides", nargs="*", metavar="key=value", help=f"any setting, e.g. {example}")


def _pretrain(p: argparse.ArgumentParser) -> Command:
    from .pretrain import PretrainSettings

    p.add_argument("--out", required=True, type=Path, help="run folder (checkpoints, logs, final model)")
    settings.add_options(p, PretrainSettings)
    _run_options(p, "continue the run in --out from its last checkpoint", "log.eval_every=100")
    return cmd_pretrain


def _finetune(p: argparse.ArgumentParser) -> Command:
    from .finetune import FinetuneSettings

    settings.add_options(p, FinetuneSettings)
    _run_options(p, "keep finished grid runs, continue the unfinished one", "optim.weight_decay=0")
    return cmd_finetune


def _distill(p: argparse.ArgumentParser) -> Command:
    from .distillation import DistillSettings

    settings.add_options(p, DistillSettings)
    _run_options(p, "continue the run in --out from its last checkpoint", "loss.temperature=4")
    return cmd_distill


def _evaluate(p: argparse.ArgumentParser) -> Command:
    from .finetune_settings import FinetuneDataSettings

    p.add_argument("--model", required=True, type=Path, help="a fine-tuned (or exported) model folder, or a Hugging Face name")
    p.add_argument("--data", required=True, type=Path,
                   help="a labelled file in the task's format (docs/your-data.md), or a retrieval set in BEIR's "
                        "layout (a folder: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) for an embedder")
    _add_inference_options(p)
    retrieval = p.add_argument_group("retrieval (--data a BEIR folder)")
    retrieval.add_argument("--first-stage", type=Path, metavar="EMBEDDER",
                           help="retrieve with this embedder and rerank its top --top-k with --model (a pair model)")
    retrieval.add_argument("--top-k", type=int, default=100, help="documents retrieved a query (default 100)")
    retrieval.add_argument("--split", default="test", help="the judgments to read: qrels/SPLIT.tsv (default test)")
    retrieval.add_argument("--per-query", type=Path, metavar="FILE", help="each query's scores, as JSON lines")
    settings.add_options(p.add_argument_group("data format (for your own files)"), FinetuneDataSettings,
                         skip=("train", "dev", "test"))
    return cmd_evaluate


def _predict(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--model", required=True, type=Path, help="a fine-tuned (or exported) model folder, or a Hugging Face name")
    p.add_argument("text", nargs="*", help="texts (pair task: first texts; qa: questions)")
    p.add_argument("--pair", nargs="+", help="second texts (pair task) or contexts (qa); one is used for every text")
    p.add_argument("--sep", help="pair/qa: what separates the two texts of an input line (default: a tab)")
    p.add_argument("--words", action="store_true", help="ner: the inputs are words already, split by spaces (as CoNLL's)")
    p.add_argument("--file", type=Path, help="a file of inputs, one per line")
    _add_inference_options(p)
    return cmd_predict


def _fill_mask(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--model", required=True, type=Path, help="a pre-trained model folder (with its masked-LM head)")
    p.add_argument("text", nargs="*", help="texts with [MASK] (default: --file, or lines of stdin)")
    p.add_argument("--file", type=Path, help="a file of texts, one per line")
    p.add_argument("--top-k", type=int, default=5, help="tokens per mask (default 5)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return cmd_fill_mask


def _embed(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--model", required=True, type=Path, help="any model folder (its encoder), or an exported encoder")
    p.add_argument("text", nargs="*", help="texts (default: --file, or lines of stdin)")
    p.add_argument("--file", type=Path, help="a file of texts, one per line")
    p.add_argument("--pooling", choices=["mean", "cls", "pooler"],
                   help="mean of the token vectors, the [CLS] vector, or the pooler's output (default: what the "
                        "folder's sentence-transformers files say, else mean)")
    p.add_argument("--normalize", action="store_true",
                   help="unit length (dot product = cosine); on by itself where the folder's files say so")
    p.add_argument("--out", type=Path, help="write all vectors to this .npy file instead of JSON lines")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return cmd_embed


def _columns(spec: str) -> dict[str, str | int]:
    from .finetune_settings import parse_columns

    return parse_columns(spec)


def _mine(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--model", required=True, type=Path, help="the embedder that ranks the passages")
    p.add_argument("--data", required=True, type=Path, help="pairs (anchor, positive) in TSV/CSV/JSON lines; groups "
                                                             "and scored pairs give their anchor and positive")
    p.add_argument("--out", required=True, type=Path, help="the groups file to write (TSV, or .jsonl)")
    p.add_argument("--negatives", type=int, default=3, help="hard negatives an anchor (default 3)")
    p.add_argument("--range", default="10:50", metavar="START:END",
                   help="where in each anchor's ranking (its positives left out) negatives are taken (default 10:50)")
    p.add_argument("--reranker", type=Path, help="a cross-encoder that drops likely false negatives")
    p.add_argument("--margin", type=float, default=0.1,
                   help="with --reranker: drop a candidate scored above the positive's score minus this (default 0.1)")
    p.add_argument("--corpus", type=Path, help="more passages to mine from, one per line")
    p.add_argument("--columns", type=_columns, help="where fields are, e.g. anchor=0,positive=1")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return cmd_mine


def cmd_mine(args: argparse.Namespace) -> None:
    from .embed import Embedder
    from .mining import mine, write_groups
    from .predict import pipeline
    from .retrieval import cross_encoder
    from .tasks import get_task

    start, sep, end = args.range.partition(":")
    if not sep or not start.isdigit() or not end.isdigit():
        raise BertkitError(f"--range {args.range!r}: expected START:END, e.g. 10:50")
    data = get_task("embed").read(args.data, **({"columns": args.columns} if args.columns else {}))
    corpus = [line.strip() for line in args.corpus.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if args.corpus else []
    rerank = cross_encoder(pipeline(args.reranker, device=args.device, batch_size=args.batch_size)) \
        if args.reranker else None
    found = mine(Embedder(args.model, batch_size=args.batch_size, device=args.device),
                 [(e.anchor, e.positive) for e in data], args.negatives, (int(start), int(end)), rerank, args.margin,
                 corpus)
    write_groups(args.out, found.groups)
    print(json.dumps({"out": str(args.out), "groups": len(found.groups), "dropped": found.dropped,
                      "reranked_out": found.reranked_out}))


def _attention(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--model", required=True, type=Path, help="any model folder")
    p.add_argument("text", help="the text (segment A)")
    p.add_argument("--pair", help="a second text (segment B)")
    p.add_argument("--out", required=True, type=Path, help="PNG to write")
    p.add_argument("--layer", type=int, help="draw one head large: its layer (from 0), with --head")
    p.add_argument("--head", type=int, help="draw one head large: its number in the layer (from 0), with --layer")
    return cmd_attention


def _mask(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt or tokenizer.json (a vocabulary, data or model folder)")
    p.add_argument("text", help="the text (segment A; split in two at a sentence boundary when no --pair)")
    p.add_argument("--pair", help="segment B")
    p.add_argument("--whole-word-masking", action="store_true", help="mask whole words (Chinese: jieba words)")
    p.add_argument("--seed", type=int, default=12345, help="the pre-training seed (train.seed)")
    p.add_argument("--epoch", type=int, default=0, help="the epoch: each draws new masks")
    p.add_argument("--index", type=int, default=0, help="the instance's index in the data")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return cmd_mask


def _serve(p: argparse.ArgumentParser) -> Command:
    from .server import ServeSettings

    settings.add_options(p, ServeSettings)
    return cmd_serve


def _plot(p: argparse.ArgumentParser) -> Command:
    p.add_argument("run", type=Path, help="run folder")
    p.add_argument("--out", type=Path, help="PNG path (default RUN/curves.png)")
    return cmd_plot


def _info(p: argparse.ArgumentParser) -> Command:
    p.add_argument("model", type=Path, help="model folder (config.json + model.safetensors, or model.onnx)")
    return cmd_info


def _export(p: argparse.ArgumentParser) -> Command:
    p.add_argument("--model", required=True, type=Path, help="model folder")
    p.add_argument("--out", required=True, type=Path, help="output folder (replaced whole)")
    p.add_argument("--quantize", choices=["int8"], help="int8 weights (onnxruntime's dynamic quantization, per channel)")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    return cmd_export


# name: (help, description, the function that adds its options and gives what runs it)
COMMANDS: dict[str, tuple[str, str, Callable[[argparse.ArgumentParser], Command]]] = {
    "demo": ("BERT's whole story on built-in data, in about ten minutes",
             "Learn a vocabulary, pre-train a tiny BERT, fine-tune it and a randomly initialized twin on four tasks, "
             "and write OUT/report.html. Rerun to resume.", _demo),
    "tokenize": ("text -> WordPiece tokens and ids (JSON lines)",
                 "Tokenize texts given as arguments, or one per line from stdin.", _tokenize),
    "vocab": ("train a WordPiece vocabulary from text files",
              "Train a WordPiece vocabulary; writes OUT/vocab.txt and OUT/tokenizer_config.json.", _vocab),
    "prepare": ("raw text -> pre-training instances (MLM + NSP) on disk",
                "Read a corpus, build Google-style pre-training instances, write shards to OUT.", _prepare),
    "pretrain": ("pre-train BERT (MLM + NSP) on a prepared data folder",
                 "Pre-train BERT. Settings come from --config (TOML/JSON), the options below, then key=value "
                 "overrides such as optim.warmup=0.05 or train.accumulation=4.", _pretrain),
    "finetune": ("fine-tune on a labelled task (classify, pair, qa, ner; embed, rerank)",
                 "Fine-tune a pre-trained BERT the way the paper does; the best model goes to OUT/model. Settings come "
                 "from --config (TOML/JSON), the options below, then key=value overrides such as optim.weight_decay=0 "
                 "or train.eval_batch_size=128.", _finetune),
    "distill": ("a small student that learns a fine-tuned teacher's answers",
                "Distill a fine-tuned teacher into a smaller student (the teacher's own layers, a preset, or a "
                "pre-trained small model): soft targets, labels, hidden states and attention, each weighted; "
                "OUT/model is an ordinary fine-tuned model folder. Settings come from --config, the options below, "
                "then key=value overrides such as loss.temperature=4.", _distill),
    "evaluate": ("scores of a fine-tuned model on a labelled file (JSON)",
                 "Evaluate a model folder written by `bertkit finetune` on a labelled file.", _evaluate),
    "predict": ("predictions of a fine-tuned model (JSON lines)",
                "Predict with a fine-tuned model: texts from arguments, --file, or stdin, one per line.", _predict),
    "fill-mask": ("what a pre-trained model guesses for [MASK] (JSON lines)",
                  "The most probable tokens at each [MASK] of each text: the task BERT is pre-trained on.", _fill_mask),
    "embed": ("sentence embeddings (JSON lines, or .npy)",
              "One vector per text from a model's encoder, in length-sorted batches.", _embed),
    "mine": ("hard negatives for embedders and rerankers, into a groups file",
             "For each anchor of a pairs file, passages its embedder ranks in --range but that are not its positive "
             "(minus those a --reranker scores within --margin of the positive): a groups file that `finetune --task "
             "embed` and `--task rerank` read.", _mine),
    "attention": ("draw a text's attention maps and input representation to a PNG",
                  "Every head's attention over one text (or one head, large), below the input representation drawn "
                  "as the paper's Figure 2.", _attention),
    "mask": ("what pre-training's masking does to one input",
             "Tokenize a text (and a pair) as prepare does and mask it as training does: the 15% chosen, and which "
             "became [MASK], a random token, or stayed.", _mask),
    "serve": ("a fine-tuned model behind HTTP, with dynamic batching",
              'Serve a fine-tuned model folder (PyTorch or exported) over HTTP: POST /v1/predict {"inputs": [...]}, '
              "GET /v1/model, /health, /metrics. Concurrent requests are batched together. SIGTERM drains the "
              "requests in flight, then exits 0.", _serve),
    "plot": ("draw a run's curves to a PNG", "Draw RUN/log.jsonl to RUN/curves.png.", _plot),
    "info": ("a model folder's config and parameter counts by part",
             "Print a model folder's config and its parameter counts by part (or, exported, what the export "
             "recorded).", _info),
    "export": ("a model folder -> ONNX for onnxruntime (int8 if asked)",
               "Export a fine-tuned model (or a pre-trained encoder) to OUT/model.onnx with its config, tokenizer and "
               "task: a model folder that predict, evaluate and serve take, run by onnxruntime without PyTorch.",
               _export),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Gives the command line's parser: every command with its options, or only `only`'s options (the others
    listed by name), which is what running one command needs."""
    parser = _Parser(prog="bertkit", description="BERT pre-training, fine-tuning and checkpoints.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help, description, add_options) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=description)
        if only is not None and name != only:
            continue
        p.set_defaults(func=add_options(p))
        dests = {a.dest for a in p._actions}
        if "model" in dests and "revision" not in dests:  # every command that takes a model takes a Hub name too
            p.add_argument("--revision", help="with a Hugging Face model name: the branch, tag or commit to use")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), "")  # the first word: options precede none of it
    parser = build_parser(only=command)
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may stand anywhere among the options, which argparse alone does not allow
    if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="bertkit: %(message)s")
    try:
        if getattr(args, "model", None) is not None and args.command != "finetune":  # finetune records the name
            from .hub import resolve_model

            args.model = resolve_model(args.model, args.revision)
        return args.func(args) or 0
    except BertkitError as e:
        print(f"bertkit: error: {e}", file=sys.stderr)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        print(f"bertkit: error: {e.filename}: {e.strerror}", file=sys.stderr)
    except KeyboardInterrupt as e:
        print(f"bertkit: interrupted{f' ({e})' if str(e) else ''}", file=sys.stderr)
        return 130
    return 2


def _add_inference_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-size", type=int, default=32, help="inputs a forward pass (sorted by length)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast (PyTorch models)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: a GPU when there is one")


if __name__ == "__main__":
    sys.exit(main())
