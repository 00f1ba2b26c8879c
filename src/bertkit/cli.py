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
    from .pretraining import prepare

    meta = prepare(
        args.input, args.vocab, args.out, max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
        masked_lm_prob=args.masked_lm_prob, max_predictions_per_seq=args.max_predictions_per_seq,
        whole_word_masking=args.whole_word_masking, static_masking=args.static_masking, dupe_factor=args.dupe_factor,
        eval_fraction=args.eval_fraction, seed=args.seed, input_format=args.format, text_field=args.text_field,
        lang=args.lang, on_error=args.on_error, workers=args.workers,
    )
    counts = meta.get("counts", {})
    print(f"wrote {args.out}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items() if isinstance(v, int)))


PRETRAIN_FLAGS = {"data": "data.path", "preset": "model.preset", "steps": "train.steps", "batch_size": "train.batch_size",
                  "lr": "optim.lr", "precision": "train.precision", "device": "train.device", "seed": "train.seed",
                  "accumulation": "train.accumulation", "gradient_checkpointing": "train.gradient_checkpointing"}


def cmd_pretrain(args: argparse.Namespace) -> None:
    from . import settings
    from .pretrain import PretrainSettings, pretrain

    base = args.config
    saved = args.out / "config.json"
    if args.resume and base is None and saved.is_file():
        base = saved  # resuming: the run's own settings, with what this command line changes
    flags = {key: getattr(args, name) for name, key in PRETRAIN_FLAGS.items()}
    cfg = settings.load(PretrainSettings, base, args.overrides, flags)
    out = pretrain(cfg, args.out, resume=args.resume)
    print(f"model: {out}")


def _read_options(args: argparse.Namespace) -> dict:
    """Reader options given on the command line for `evaluate`: a file format and a column mapping."""
    opts: dict = {}
    if args.format:
        opts["format"] = args.format
    if args.columns:
        opts["columns"] = _columns(args.columns)
    if args.no_header:
        opts["header"] = False
    if args.normalize:
        opts["normalize"] = args.normalize
    if args.skip_bad_rows:
        opts["bad_rows"] = "skip"
    if getattr(args, "label_sep", None):
        opts["label_sep"] = args.label_sep
    return opts


def _columns(spec: str) -> dict[str, str | int]:
    """--columns "text=0,label=1" or "text=review,label=label": where each field is, by index or header name."""
    cols: dict[str, str | int] = {}
    for item in spec.split(","):
        name, sep, col = item.partition("=")
        if not sep:
            raise BertkitError(f"--columns {spec!r}: expected name=column pairs, e.g. text=0,label=1")
        cols[name.strip()] = int(col) if col.strip().lstrip("-").isdigit() else col.strip()
    return cols


def _grid(spec: str) -> dict[str, list]:
    """--grid with no value: the paper's grid; "batch_size=16,32;lr=5e-5,3e-5;epochs=2,3" a subset."""
    grid: dict[str, list] = {}
    for part in filter(None, spec.split(";")):
        key, sep, values = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in ("batch_size", "lr", "epochs"):
            raise BertkitError(f"--grid {spec!r}: expected batch_size=..;lr=..;epochs=.. (any of them)")
        kind = float if key == "lr" else int
        try:
            grid[key] = [kind(v) for v in values.split(",")]
        except ValueError:
            raise BertkitError(f"--grid {spec!r}: {key} values must be numbers") from None
    return grid


# option -> setting it sets (None: not given); flags turned on by their presence map to True
FINETUNE_FLAGS = {
    "task": "task.name", "model": "model", "revision": "revision", "out": "out", "train": "data.train", "dev": "data.dev", "test": "data.test",
    "epochs": "train.epochs", "batch_size": "train.batch_size", "lr": "optim.lr", "max_seq_length": "task.max_seq_length",
    "seed": "train.seed", "warmup": "optim.warmup", "precision": "train.precision", "device": "train.device",
    "format": "data.format", "normalize": "data.normalize", "skip_bad_rows": "data.skip_bad_rows",
    "regression": "task.regression", "scheme": "task.scheme", "doc_stride": "task.doc_stride", "crf": "task.crf",
    "constrained": "task.constrained", "metric": "train.metric", "eval_every": "train.eval_every",
    "early_stopping": "train.early_stopping", "accumulation": "train.accumulation",
    "gradient_checkpointing": "train.gradient_checkpointing", "multi_label": "task.multi_label",
    "threshold": "task.threshold", "tune_thresholds": "task.tune_thresholds", "label_sep": "data.label_sep",
    "class_weights": "train.class_weights", "null_threshold": "task.null_threshold", "long": "task.long",
    "stride": "task.stride",
}


def cmd_finetune(args: argparse.Namespace) -> None:
    from . import settings
    from .finetune import FinetuneSettings, finetune

    base = args.config
    if args.resume and base is None and args.out is not None and (args.out / "config.json").is_file():
        base = args.out / "config.json"  # resuming: the run's own settings, with what this command line changes
    flags = {key: getattr(args, name) for name, key in FINETUNE_FLAGS.items()}
    flags["data.columns"] = _columns(args.columns) if args.columns else None
    flags["data.header"] = False if args.no_header else None
    if args.grid is not None:  # --grid alone: the paper's grid; with a SPEC, those values
        grid = _grid(args.grid)
        flags.update({f"grid.{k}": v for k, v in grid.items()} if grid else {"grid": {}})
    cfg = settings.load(FinetuneSettings, base, args.overrides, flags)
    summary = finetune(cfg, resume=args.resume)
    best = summary["best"]
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, one answer
        print(json.dumps({"best": best, **({"test": summary["test"]} if "test" in summary else {}), "model": str(Path(cfg.out) / "model")}))


def cmd_evaluate(args: argparse.Namespace) -> None:
    from .predict import pipeline

    pipe = pipeline(args.model, device=args.device, precision=args.precision, batch_size=args.batch_size)
    print(json.dumps(pipe.evaluate(args.data, **_read_options(args)), ensure_ascii=False))


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
    vectors = Embedder(args.model, pooling=args.pooling, normalize=args.normalize, batch_size=args.batch_size,
                       device=args.device)(texts, progress=args.out is not None)
    if args.out is not None:
        from .fileio import atomic_write

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.save(f, vectors)

        atomic_write(args.out, write)
        print(f"wrote {args.out}: {vectors.shape[0]} x {vectors.shape[1]} float32 ({args.pooling} pooling)")
        return
    for text, vector in zip(texts, vectors, strict=True):
        print(json.dumps({"text": text, "embedding": [round(float(x), 6) for x in vector]}, ensure_ascii=False))


def cmd_attention(args: argparse.Namespace) -> None:
    from .attention import plot_attention

    print(plot_attention(args.model, args.text, args.pair, args.out, layer=args.layer, head=args.head))


def cmd_mask(args: argparse.Namespace) -> None:
    from .masking import format_masking, show_masking

    shown = show_masking(args.vocab, args.text, args.pair, whole_word_masking=args.whole_word_masking, seed=args.seed,
                         epoch=args.epoch, index=args.index)
    print(json.dumps(shown, ensure_ascii=False) if args.json else format_masking(shown))


def cmd_serve(args: argparse.Namespace) -> None:
    from .serve import ServeSettings, serve

    serve(ServeSettings(model=args.model, host=args.host, port=args.port, max_batch_size=args.max_batch_size,
                        max_wait_ms=args.max_wait_ms, max_inputs=args.max_inputs, max_body_bytes=args.max_body_bytes,
                        device=args.device, precision=args.precision))


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import DemoSettings, demo

    out = args.out or Path("runs") / f"demo-{args.lang}"
    report = demo(DemoSettings(lang=args.lang, minutes=args.minutes, out=out, seed=args.seed, smoke=args.smoke))
    print(f"report: {report}")


def cmd_plot(args: argparse.Namespace) -> None:
    from .demo.plots import plot_run

    print(plot_run(args.run, args.out))


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one line (exit code 2) instead of the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bertkit", description="BERT pre-training, fine-tuning and checkpoints.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="BERT's whole story on built-in data, in about ten minutes",
                       description="Learn a vocabulary, pre-train a tiny BERT, fine-tune it and a randomly initialized "
                                   "twin on four tasks, and write OUT/report.html. Rerun to resume.")
    p.add_argument("--lang", choices=["en", "zh"], default="en")
    p.add_argument("--minutes", type=float, default=10.0, help="time budget (default 10)")
    p.add_argument("--out", type=Path, help="output folder (default runs/demo-LANG)")
    p.add_argument("--seed", type=int, default=0, help="every random choice of the demo follows it")
    p.add_argument("--smoke", action="store_true", help="a quick check that everything runs (few steps, small samples)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("tokenize", help="text -> WordPiece tokens and ids (JSON lines)",
                       description="Tokenize texts given as arguments, or one per line from stdin.")
    p.add_argument("text", nargs="*", help="texts to tokenize (default: lines of stdin)")
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt (a model or vocabulary folder)")
    p.add_argument("--pair", help="a second text, encoded as segment B")
    p.add_argument("--max-length", type=int, help="truncate to this many tokens, specials included")
    p.add_argument("--offsets", action="store_true", help="also print character offsets into the text")
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("vocab", help="train a WordPiece vocabulary from text files",
                       description="Train a WordPiece vocabulary; writes OUT/vocab.txt and OUT/tokenizer_config.json.")
    p.add_argument("--input", required=True, nargs="+", type=Path, help="text files or folders (.txt, .gz)")
    p.add_argument("--vocab-size", required=True, type=int, help="number of tokens, specials included")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case, strip accents)")
    p.add_argument("--min-frequency", type=int, default=2, help="minimum count of a merged piece (default 2)")
    p.add_argument("--on-error", default="stop", choices=["skip", "stop"],
                   help="a line that is not UTF-8: stop with an error naming it (default), or skip and count it")
    p.set_defaults(func=cmd_vocab)

    p = sub.add_parser("prepare", help="raw text -> pre-training instances (MLM + NSP) on disk",
                       description="Read a corpus, build Google-style pre-training instances, write shards to OUT.")
    p.add_argument("--input", required=True, nargs="+", type=Path, help="files or folders (.txt, .gz, .jsonl)")
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt (from `bertkit vocab`)")
    p.add_argument("--out", required=True, type=Path, help="output data folder")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--masked-lm-prob", type=float, default=0.15)
    p.add_argument("--max-predictions-per-seq", type=int, help="default: round(max_seq_length x masked_lm_prob)")
    p.add_argument("--whole-word-masking", action="store_true", help="mask whole words (Chinese: jieba words)")
    p.add_argument("--static-masking", action="store_true", help="draw masks once here (default: anew every epoch)")
    p.add_argument("--dupe-factor", type=int, help="with --static-masking: copies with different masks (default 10)")
    p.add_argument("--eval-fraction", type=float, default=0.01, help="documents held out for evaluation")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--format", default="auto", choices=["auto", "google", "lines", "paragraphs", "jsonl"])
    p.add_argument("--text-field", default="text", help="JSON lines: the field holding the text")
    p.add_argument("--lang", default="auto", choices=["auto", "en", "zh"], help="sentence splitting rules")
    p.add_argument("--on-error", default="skip", choices=["skip", "stop"], help="bad files and lines: skip and count, or stop")
    p.add_argument("--workers", type=int, help="processes (default: all cores)")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("pretrain", help="pre-train BERT (MLM + NSP) on a prepared data folder",
                       description="Pre-train BERT. Settings come from --config (TOML/JSON), the options below, "
                                   "then key=value overrides such as optim.warmup=0.05 or train.accumulation=4.")
    p.add_argument("--data", type=Path, help="data folder made by `bertkit prepare`")
    p.add_argument("--out", required=True, type=Path, help="run folder (checkpoints, logs, final model)")
    p.add_argument("--preset", choices=list(_presets()), help="model size (default tiny)")
    p.add_argument("--steps", type=int, help="optimizer steps (default 1000)")
    p.add_argument("--batch-size", type=int, help="sequences per optimizer step, all processes together")
    p.add_argument("--accumulation", type=int, help="micro-batches per step, run one after another (default 1)")
    p.add_argument("--gradient-checkpointing", action="store_true", default=None,
                   help="recompute activations in the backward pass: less memory, about a third more time")
    p.add_argument("--lr", type=float, help="peak learning rate (default 1e-4)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="default fp32; bf16 autocast; fp16 with loss scaling (CUDA)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default auto: a GPU when there is one")
    p.add_argument("--seed", type=int, help="default 12345")
    p.add_argument("--config", type=Path, help="settings file (.toml or .json)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="any setting, e.g. log.eval_every=100")
    p.set_defaults(func=cmd_pretrain)

    p = sub.add_parser("finetune", help="fine-tune on a labelled task (classify, pair, qa, ner)",
                       description="Fine-tune a pre-trained BERT the way the paper does; the best model goes to OUT/model. "
                                   "Settings come from --config (TOML/JSON), the options below, then key=value "
                                   "overrides such as optim.weight_decay=0 or train.eval_batch_size=128.")
    p.add_argument("--task", choices=["classify", "pair", "qa", "ner"], help="the task family (default classify)")
    p.add_argument("--model", type=Path, help="pre-trained model: a folder (bertkit's or Hugging Face's layout) or a "
                                              "Hugging Face name such as bert-base-chinese")
    p.add_argument("--train", type=Path, help="training file")
    p.add_argument("--dev", type=Path, help="dev file: scored after every epoch")
    p.add_argument("--test", type=Path, help="test file: the best model is scored on it at the end")
    p.add_argument("--out", type=Path, help="output folder (OUT/model, OUT/results.json)")
    p.add_argument("--epochs", type=int, help="default 3")
    p.add_argument("--batch-size", type=int, help="default 32")
    p.add_argument("--lr", type=float, help="peak learning rate (default 2e-5)")
    p.add_argument("--max-seq-length", type=int, help="default 128; 384 for qa")
    p.add_argument("--seed", type=int, help="default 42")
    p.add_argument("--warmup", type=float, help="warmup proportion of the steps (default 0.1)")
    p.add_argument("--metric", help="the dev score that keeps the best checkpoint and picks the grid run (default: "
                                    "accuracy; f1 for ner and qa; pearson for regression), e.g. f1 or mcc")
    p.add_argument("--eval-every", type=int, metavar="STEPS", help="evaluate on dev every STEPS updates too (default: every epoch)")
    p.add_argument("--early-stopping", type=int, metavar="PATIENCE",
                   help="stop a run after PATIENCE evaluations without a better --metric")
    p.add_argument("--accumulation", type=int, help="split each batch into this many micro-batches run one after "
                                                     "another: the same updates in less memory (default 1)")
    p.add_argument("--gradient-checkpointing", action="store_true", default=None,
                   help="recompute activations in the backward pass: less memory, about a third more time")
    p.add_argument("--grid", nargs="?", const="", metavar="SPEC",
                   help="the paper's grid (batch 16/32 x lr 5e-5/3e-5/2e-5 x epochs 2/3/4), or a subset: 'lr=5e-5,3e-5;epochs=2'")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="default fp32")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default auto")
    p.add_argument("--config", type=Path, help="settings file (.toml or .json)")
    p.add_argument("--resume", action="store_true", help="keep finished grid runs, continue the unfinished one")
    _add_read_options(p)
    p.add_argument("--regression", action="store_true", default=None, help="classify/pair: predict a score (labels are numbers)")
    p.add_argument("--multi-label", action="store_true", default=None,
                   help="classify/pair: any number of labels an example (a JSON list in JSON lines, or joined by "
                        "--label-sep in a TSV/CSV cell); a sigmoid each, binary cross-entropy")
    p.add_argument("--threshold", type=float, help="multi-label: predict a label from this probability (default 0.5)")
    p.add_argument("--tune-thresholds", action="store_true", default=None,
                   help="multi-label: tune each label's threshold on dev (its best F1) and save them with the model")
    p.add_argument("--long", choices=["truncate", "sliding"],
                   help="classify: a text longer than --max-seq-length is truncated (default), or read in sliding "
                        "windows whose logits are averaged (max-pooled for --multi-label)")
    p.add_argument("--stride", type=int, help="--long sliding: tokens between window starts (default half a window)")
    p.add_argument("--class-weights", metavar="auto|W1,W2,...",
                   help="classify/pair: weight the loss by class, 'auto' (balanced) or one weight a label in label order")
    p.add_argument("--scheme", choices=["BIO", "BIOES"], help="ner: tagging scheme to learn (default: the file's)")
    p.add_argument("--doc-stride", type=int, help="qa: tokens between passage windows (default 128)")
    p.add_argument("--null-threshold", type=float,
                   help="qa with unanswerable questions (SQuAD 2.0): answer nothing when the null score beats the best "
                        "span by more than this (default: the threshold with the best dev F1, searched after training)")
    p.add_argument("--crf", action="store_true", default=None, help="ner: a CRF layer over the tags (Viterbi decoding)")
    p.add_argument("--constrained", action="store_true", default=None,
                   help="ner without --crf: decode the most probable tag sequence the scheme allows (well-formed "
                        "BIO/BIOES), not each word's most probable tag alone")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="any setting, e.g. optim.weight_decay=0")
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("evaluate", help="scores of a fine-tuned model on a labelled file (JSON)",
                       description="Evaluate a model folder written by `bertkit finetune` on a labelled file.")
    p.add_argument("--model", required=True, type=Path, help="a fine-tuned (or exported) model folder, or a Hugging Face name")
    p.add_argument("--data", required=True, type=Path, help="a labelled file in the task's format (docs/your-data.md)")
    _add_inference_options(p)
    _add_read_options(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("predict", help="predictions of a fine-tuned model (JSON lines)",
                       description="Predict with a fine-tuned model: texts from arguments, --file, or stdin, one per line.")
    p.add_argument("--model", required=True, type=Path, help="a fine-tuned (or exported) model folder, or a Hugging Face name")
    p.add_argument("text", nargs="*", help="texts (pair task: first texts; qa: questions)")
    p.add_argument("--pair", nargs="+", help="second texts (pair task) or contexts (qa); one is used for every text")
    p.add_argument("--sep", help="pair/qa: what separates the two texts of an input line (default: a tab)")
    p.add_argument("--words", action="store_true", help="ner: the inputs are words already, split by spaces (as CoNLL's)")
    p.add_argument("--file", type=Path, help="a file of inputs, one per line")
    _add_inference_options(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("fill-mask", help="what a pre-trained model guesses for [MASK] (JSON lines)",
                       description="The most probable tokens at each [MASK] of each text: the task BERT is pre-trained on.")
    p.add_argument("--model", required=True, type=Path, help="a pre-trained model folder (with its masked-LM head)")
    p.add_argument("text", nargs="*", help="texts with [MASK] (default: --file, or lines of stdin)")
    p.add_argument("--file", type=Path, help="a file of texts, one per line")
    p.add_argument("--top-k", type=int, default=5, help="tokens per mask (default 5)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.set_defaults(func=cmd_fill_mask)

    p = sub.add_parser("embed", help="sentence embeddings (JSON lines, or .npy)",
                       description="One vector per text from a model's encoder, in length-sorted batches.")
    p.add_argument("--model", required=True, type=Path, help="any model folder (its encoder), or an exported encoder")
    p.add_argument("text", nargs="*", help="texts (default: --file, or lines of stdin)")
    p.add_argument("--file", type=Path, help="a file of texts, one per line")
    p.add_argument("--pooling", choices=["mean", "cls", "pooler"], default="mean",
                   help="mean of the token vectors (default), the [CLS] vector, or the pooler's output")
    p.add_argument("--normalize", action="store_true", help="unit length (dot product = cosine)")
    p.add_argument("--out", type=Path, help="write all vectors to this .npy file instead of JSON lines")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("attention", help="draw a text's attention maps and input representation to a PNG",
                       description="Every head's attention over one text (or one head, large), below the input "
                                   "representation drawn as the paper's Figure 2.")
    p.add_argument("--model", required=True, type=Path, help="any model folder")
    p.add_argument("text", help="the text (segment A)")
    p.add_argument("--pair", help="a second text (segment B)")
    p.add_argument("--out", required=True, type=Path, help="PNG to write")
    p.add_argument("--layer", type=int, help="draw one head large: its layer (from 0), with --head")
    p.add_argument("--head", type=int, help="draw one head large: its number in the layer (from 0), with --layer")
    p.set_defaults(func=cmd_attention)

    p = sub.add_parser("mask", help="what pre-training's masking does to one input",
                       description="Tokenize a text (and a pair) as prepare does and mask it as training does: the "
                                   "15%% chosen, and which became [MASK], a random token, or stayed.")
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt (a vocabulary, data or model folder)")
    p.add_argument("text", help="the text (segment A; split in two at a sentence boundary when no --pair)")
    p.add_argument("--pair", help="segment B")
    p.add_argument("--whole-word-masking", action="store_true", help="mask whole words (Chinese: jieba words)")
    p.add_argument("--seed", type=int, default=12345, help="the pre-training seed (train.seed)")
    p.add_argument("--epoch", type=int, default=0, help="the epoch: each draws new masks")
    p.add_argument("--index", type=int, default=0, help="the instance's index in the data")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_mask)

    p = sub.add_parser("serve", help="a fine-tuned model behind HTTP, with dynamic batching",
                       description="Serve a fine-tuned model folder (PyTorch or exported) over HTTP: POST /v1/predict "
                                   '{"inputs": [...]}, GET /v1/model, /health, /metrics. Concurrent requests are '
                                   "batched together. SIGTERM drains the requests in flight, then exits 0.")
    p.add_argument("--model", required=True, type=Path, help="model folder from `bertkit finetune` or `bertkit export`")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch-size", type=int, default=32, help="inputs per forward pass (default 32)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a request waits for others to batch with (default 5)")
    p.add_argument("--max-inputs", type=int, default=256, help="inputs per request, at most (default 256)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body size, at most (default 1 MiB)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("plot", help="draw a run's curves to a PNG", description="Draw RUN/log.jsonl to RUN/curves.png.")
    p.add_argument("run", type=Path, help="run folder")
    p.add_argument("--out", type=Path, help="PNG path (default RUN/curves.png)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("info", help="a model folder's config and parameter counts by part",
                       description="Print a model folder's config and its parameter counts by part (or, exported, "
                                   "what the export recorded).")
    p.add_argument("model", type=Path, help="model folder (config.json + model.safetensors, or model.onnx)")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("export", help="a model folder -> ONNX for onnxruntime (int8 if asked)",
                       description="Export a fine-tuned model (or a pre-trained encoder) to OUT/model.onnx with its "
                                   "config, tokenizer and task: a model folder that predict, evaluate and serve take, "
                                   "run by onnxruntime without PyTorch.")
    p.add_argument("--model", required=True, type=Path, help="model folder")
    p.add_argument("--out", required=True, type=Path, help="output folder (replaced whole)")
    p.add_argument("--quantize", choices=["int8"], help="int8 weights (onnxruntime's dynamic quantization, per channel)")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    p.set_defaults(func=cmd_export)
    for p in sub.choices.values():  # every command that takes a model takes a Hugging Face name too
        if any(a.dest == "model" for a in p._actions):
            p.add_argument("--revision", help="with a Hugging Face model name: the branch, tag or commit to use")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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


def _add_read_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data format (for your own files)")
    g.add_argument("--format", choices=["tsv", "csv", "jsonl"], help="classify/pair: file format (default: by extension)")
    g.add_argument("--columns", help="classify/pair: where fields are, e.g. text=0,pair=1,label=2 or text=review,label=label")
    g.add_argument("--no-header", action="store_true", help="classify/pair: the table has no header row")
    g.add_argument("--normalize", choices=["NFKC"], help="ner: normalize words (e.g. full-width digits)")
    g.add_argument("--skip-bad-rows", action="store_true", default=None,
                   help="skip and count malformed rows instead of stopping")
    g.add_argument("--label-sep", help="multi-label TSV/CSV: what joins the labels in a cell (default ',')")


def _add_inference_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-size", type=int, default=32, help="inputs a forward pass (sorted by length)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast (PyTorch models)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: a GPU when there is one")


def _presets() -> list[str]:
    from .config import PRESETS

    return list(PRESETS)


if __name__ == "__main__":
    sys.exit(main())
