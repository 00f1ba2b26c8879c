"""Every command, given bad input, answers with one clear line on stderr and exit code 2 (or, for
bad rows of a data file, a counted and reported skip) — never a traceback.

`python tests/test_bad_inputs.py` writes the table of cases and answers to docs/bad-inputs.md.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit import BertConfig
from bertkit.cli import main
from bertkit.export import export
from bertkit.predict import TASK_FILE

DATA = Path(bertkit.__file__).parent / "data" / "en"


def build_fixtures(root: Path) -> dict[str, Path]:
    """Small files and folders, good and bad, for the cases below."""
    f: dict[str, Path] = {}
    root.mkdir(parents=True, exist_ok=True)
    lines = (DATA / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()
    tok = bertkit.Tokenizer.train([line.split("\t")[0] for line in lines[1:]], 600)
    f["vocab"] = root / "vocab"
    tok.save_pretrained(f["vocab"])
    torch.manual_seed(0)
    f["model"] = root / "model"
    bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(f["model"])
    tok.save_pretrained(f["model"])
    f["classifier"] = root / "classifier"
    cfg = BertConfig.preset("tiny", vocab_size=tok.vocab_size).with_labels(["a", "b"])
    bertkit.BertForSequenceClassification(cfg).save_pretrained(f["classifier"])
    tok.save_pretrained(f["classifier"])
    (f["classifier"] / TASK_FILE).write_text(json.dumps({"task": "classify", "labels": ["a", "b"]}))
    f["exported"] = root / "exported"
    export(f["classifier"], f["exported"])
    f["wrong-kind"] = root / "wrong-kind"
    bertkit.BertForSequenceClassification(cfg).save_pretrained(f["wrong-kind"])
    tok.save_pretrained(f["wrong-kind"])
    (f["wrong-kind"] / TASK_FILE).write_text(json.dumps({"task": "qa", "labels": ["a", "b"]}))  # a classifier said to be QA

    def write(name: str, text: str | bytes) -> Path:
        path = root / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        f[name] = path
        return path

    write("train.tsv", "\n".join(lines[:41]) + "\n")
    write("unseen-label.tsv", "sentence\tlabel\nhello there\tpoetry\n")
    write("ragged.tsv", "sentence\tlabel\nfine\temma\ntoo\tmany\tcolumns\n")
    write("empty.txt", "")
    write("binary.bin", bytes(range(256)) * 8)
    write("latin1.txt", "caf\xe9 au lait\n\nsecond paragraph here. And another one.\n".encode("latin-1"))
    write("bad.conll", "EU B-ORG\nrejects O extra column\n\n")
    write("bad.jsonl", '{"sentence1": "a", "sentence2": "b", "label": "x"}\nnot json\n')
    write("multi.jsonl", '{"text": "a goal", "labels": ["sport"]}\n{"text": "bread", "labels": ["food", "money"]}\n')
    write("no-answer.json", json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "Cats sleep.", "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "dogs", "answer_start": 0}]}]}]}]}))
    write("config-unknown.toml", "[optim]\nlrr = 1e-4\n")
    write("config-range.toml", "[optim]\nlr = 5.0\n")
    write("config-broken.toml", "[optim\n")
    bad_vocab = root / "vocab-no-unk"
    bad_vocab.mkdir(exist_ok=True)
    (bad_vocab / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    f["vocab-no-unk"] = bad_vocab
    shapes = root / "shapes"
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(shapes)
    config = json.loads((shapes / "config.json").read_text())
    (shapes / "config.json").write_text(json.dumps({**config, "hidden_size": 64, "num_attention_heads": 2}))
    f["shapes"] = shapes
    small = root / "small-vocab"
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=100)).save_pretrained(small)
    tok.save_pretrained(small)
    f["small-vocab"] = small
    corpus = write("corpus.txt.gz", gzip.compress(("The whale. It swam far. " * 30 + "\n\n").encode() * 40))
    f["data"] = root / "data"
    main(["prepare", "--input", str(corpus), "--vocab", str(f["vocab"]), "--out", str(f["data"]), "--workers", "1"])
    f["empty-dir"] = root / "empty-dir"
    f["empty-dir"].mkdir(exist_ok=True)
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "Cats sleep."}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "Who sleeps?"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td7\t1\n")
    f["beir"] = beir
    write("no-positive.tsv", "query\tnegative\nwho sleeps?\tcats sleep.\n")
    write("score-not-number.tsv", "text\tpair\tscore\na cat\ta dog\t3.5\nthe sea\tthe car\tsimilar\n")
    write("pairs.tsv", "anchor\tpositive\nwho sleeps?\tcats sleep.\nwho swims?\tfish swim.\n")
    f["missing"] = root / "missing.tsv"
    return f


# (command, what is wrong, arguments with {placeholders}, text the one-line answer must contain)
CASES: list[tuple[str, str, list[str], str]] = [
    ("tokenize", "missing vocabulary folder", ["tokenize", "--vocab", "{missing}", "hi"], "missing.tsv"),
    ("tokenize", "vocab.txt without [UNK]", ["tokenize", "--vocab", "{vocab-no-unk}", "hi"], "[UNK]"),
    ("tokenize", "a file instead of a folder", ["tokenize", "--vocab", "{train.tsv}", "hi"], "train.tsv: is a file"),
    ("vocab", "missing input file", ["vocab", "--input", "{missing}", "--vocab-size", "100", "--out", "{root}/v1"], "missing.tsv"),
    ("vocab", "binary input", ["vocab", "--input", "{binary.bin}", "--vocab-size", "100", "--out", "{root}/v2"], "binary.bin"),
    ("vocab", "undecodable bytes", ["vocab", "--input", "{latin1.txt}", "--vocab-size", "100", "--out", "{root}/v3"], "latin1.txt line 1"),
    ("vocab", "vocabulary size out of range", ["vocab", "--input", "{train.tsv}", "--vocab-size", "0", "--out", "{root}/v4"], "vocab"),
    ("prepare", "missing input", ["prepare", "--input", "{missing}", "--vocab", "{vocab}", "--out", "{root}/d1"], "missing.tsv"),
    ("prepare", "only an empty file", ["prepare", "--input", "{empty.txt}", "--vocab", "{vocab}", "--out", "{root}/d2"], "empty.txt"),
    ("prepare", "a model folder without vocab.txt as --vocab", ["prepare", "--input", "{train.tsv}", "--vocab", "{shapes}", "--out", "{root}/d3"], "vocab.txt"),
    ("prepare", "sequence length out of range", ["prepare", "--input", "{train.tsv}", "--vocab", "{vocab}", "--out", "{root}/d4", "--max-seq-length", "4"], "max_seq_length"),
    ("pretrain", "missing data folder", ["pretrain", "--data", "{missing}", "--out", "{root}/r1"], "missing.tsv"),
    ("pretrain", "a folder that is not prepared data", ["pretrain", "--data", "{empty-dir}", "--out", "{root}/r2"], "empty-dir"),
    ("pretrain", "unknown config key", ["pretrain", "--data", "{data}", "--out", "{root}/r3", "--config", "{config-unknown.toml}"], "unknown key optim.lrr"),
    ("pretrain", "out-of-range value", ["pretrain", "--data", "{data}", "--out", "{root}/r4", "--config", "{config-range.toml}"], "optim.lr must be in (0, 1)"),
    ("pretrain", "broken config file", ["pretrain", "--data", "{data}", "--out", "{root}/r5", "--config", "{config-broken.toml}"], "not valid TOML"),
    ("pretrain", "unknown key=value override", ["pretrain", "--data", "{data}", "--out", "{root}/r6", "train.stepz=3"], "did you mean train.steps"),
    ("pretrain", "model smaller than the data's vocabulary", ["pretrain", "--data", "{data}", "--out", "{root}/r7", "model.vocab_size=10"], "vocab"),
    ("finetune", "missing training file", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{missing}", "--dev", "{train.tsv}", "--out", "{root}/f1"], "missing.tsv"),
    ("finetune", "a folder instead of a file", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{empty-dir}", "--dev", "{train.tsv}", "--out", "{root}/f2"], "empty-dir"),
    ("finetune", "a dev label never seen in training", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{unseen-label.tsv}", "--out", "{root}/f3"], "poetry"),
    ("finetune", "a row with the wrong number of columns", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{ragged.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f4"], "ragged.tsv line 3"),
    ("finetune", "a CoNLL line with the wrong number of columns", ["finetune", "--task", "ner", "--model", "{model}", "--train", "{bad.conll}", "--dev", "{bad.conll}", "--out", "{root}/f5"], "bad.conll line 2"),
    ("finetune", "a groups file without positives", ["finetune", "--task", "embed", "--model", "{model}", "--train", "{no-positive.tsv}", "--dev", "{no-positive.tsv}", "--out", "{root}/f7"], "no-positive.tsv: no positive column"),
    ("finetune", "a score that is not a number", ["finetune", "--task", "embed", "--loss", "cosent", "--model", "{model}", "--train", "{score-not-number.tsv}", "--dev", "{score-not-number.tsv}", "--out", "{root}/f8"], "score-not-number.tsv line 3: field 'score': 'similar' is not a number"),
    ("finetune", "--matryoshka larger than the model's vectors", ["finetune", "--task", "embed", "--matryoshka", "4096,64", "--model", "{model}", "--train", "{pairs.tsv}", "--dev", "{pairs.tsv}", "--out", "{root}/f9"], "4096 is larger than the model's vectors"),
    ("finetune", "--gradient-cache with --loss cosent", ["finetune", "--task", "embed", "--loss", "cosent", "--gradient-cache", "8", "--model", "{model}", "--train", "{pairs.tsv}", "--dev", "{pairs.tsv}", "--out", "{root}/f10"], "--gradient-cache is for --loss mnrl"),
    ("finetune", "a JSON-lines line that is not JSON", ["finetune", "--task", "pair", "--model", "{model}", "--train", "{bad.jsonl}", "--dev", "{bad.jsonl}", "--out", "{root}/f6"], "bad.jsonl line 2"),
    ("finetune", "an empty file", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{empty.txt}", "--dev", "{train.tsv}", "--out", "{root}/f7"], "empty.txt"),
    ("finetune", "SQuAD answers not in their context (all skipped)", ["finetune", "--task", "qa", "--model", "{model}", "--train", "{no-answer.json}", "--dev", "{no-answer.json}", "--out", "{root}/f8"], "no training examples"),
    ("finetune", "a model folder that is no model", ["finetune", "--task", "classify", "--model", "{empty-dir}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f9"], "empty-dir"),
    ("finetune", "learning rate out of range", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f10", "--lr", "3"], "optim.lr must be in (0, 1)"),
    ("finetune", "no training file given", ["finetune", "--task", "classify", "--model", "{model}", "--dev", "{train.tsv}", "--out", "{root}/f11"], "no training file: give --train FILE"),
    ("finetune", "unknown config key", ["finetune", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f12", "--config", "{config-unknown.toml}"], "unknown key optim.lrr (did you mean optim.lr?)"),
    ("finetune", "a setting for another task", ["finetune", "--task", "classify", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f13", "--crf"], "--crf is for ner, not classify"),
    ("finetune", "a metric the task does not report", ["finetune", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f14", "--metric", "pearson"], "--metric pearson: the classify task reports accuracy, f1, mcc"),
    ("finetune", "class weights, not one a label", ["finetune", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f15", "--class-weights", "1,2"], "expected 6 positive numbers, one for each label in order"),
    ("finetune", "multi-label data without --multi-label", ["finetune", "--model", "{model}", "--train", "{multi.jsonl}", "--dev", "{multi.jsonl}", "--out", "{root}/f16"], "the label is a list ['sport']: multi-label data; fine-tune it with --multi-label"),
    ("finetune", "--label-sep without --multi-label", ["finetune", "--model", "{model}", "--train", "{train.tsv}", "--dev", "{train.tsv}", "--out", "{root}/f17", "--label-sep", "|"], "--label-sep is for --multi-label"),
    ("finetune", "sliding windows for pairs", ["finetune", "--task", "pair", "--model", "{model}", "--train", "{bad.jsonl}", "--dev", "{bad.jsonl}", "--out", "{root}/f18", "--long", "sliding"], "--long is for classify, not pair"),
    ("export", "missing model folder", ["export", "--model", "{missing}", "--out", "{root}/e1"], "missing.tsv: no such model folder"),
    ("export", "an opset the exporter cannot write", ["export", "--model", "{classifier}", "--out", "{root}/e2", "--opset", "13"], "--opset must be 18 or more"),
    ("export", "unknown quantization", ["export", "--model", "{classifier}", "--out", "{root}/e3", "--quantize", "int4"], "invalid choice: 'int4'"),
    ("predict", "an exported model on a GPU", ["predict", "--model", "{exported}", "--device", "cuda", "hello"], "an exported model runs on the CPU"),
    ("serve", "an embedder in bf16", ["serve", "--model", "{model}", "--precision", "bf16"], "an embedder serves in fp32"),
    ("serve", "an unknown pooling", ["serve", "--model", "{model}", "--pooling", "max"], "invalid choice: 'max'"),
    ("serve", "a batch size out of range", ["serve", "--model", "{exported}", "--max-batch-size", "0"], "must be positive"),
    ("evaluate", "a pre-trained (not fine-tuned) model", ["evaluate", "--model", "{model}", "--data", "{train.tsv}"], "was not fine-tuned"),
    ("evaluate", "a BEIR qrels line naming an unknown document", ["evaluate", "--model", "{model}", "--data", "{beir}"],
     "qrels/test.tsv line 3: field 'corpus-id': 'd7' is not in corpus.jsonl"),
    ("evaluate", "a model folder of the wrong kind", ["evaluate", "--model", "{wrong-kind}", "--data", "{train.tsv}"], "holds a BertForSequenceClassification"),
    ("predict", "missing model folder", ["predict", "--model", "{missing}", "hello"], "missing.tsv"),
    ("predict", "missing input file", ["predict", "--model", "{classifier}", "--file", "{missing}"], "missing.tsv"),
    ("plot", "not a run folder", ["plot", "{empty-dir}"], "no log.jsonl"),
    ("info", "weights of the wrong shape", ["info", "{shapes}"], "wrong shape"),
    ("info", "vocab.txt larger than the config's vocab_size", ["info", "{small-vocab}"], "vocab_size is 100"),
    ("info", "a file instead of a folder", ["info", "{train.tsv}"], "is a file, not a model folder"),
    ("demo", "time budget out of range", ["demo", "--minutes", "-1", "--out", "{root}/demo"], "minutes must be positive"),
]


def run_case(args: list[str], fixtures: dict[str, Path]) -> tuple[int, str]:
    values = {k: str(v) for k, v in fixtures.items()} | {"root": str(fixtures["vocab"].parent)}
    argv = []
    for a in args:
        for key, value in values.items():
            a = a.replace("{" + key + "}", value)
        argv.append(a)
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    lines = [line for line in err.getvalue().splitlines() if line.startswith("bertkit") and "error" in line]
    return code, lines[-1] if lines else err.getvalue()


def test_vocab_can_skip_lines_that_are_not_utf8(fixtures: dict[str, Path]) -> None:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(["vocab", "--input", str(fixtures["latin1.txt"]), "--vocab-size", "100", "--on-error", "skip",
                     "--out", str(fixtures["vocab"].parent / "v-skip")])
    assert code == 0
    assert f"skipped 1 line(s) that are not valid UTF-8, first: {fixtures['latin1.txt']} line 1" in err.getvalue()
    vocab = (fixtures["vocab"].parent / "v-skip" / "vocab.txt").read_text().split()
    assert "s" in vocab and "u" not in vocab  # the good lines were learned ("u" is only in the bad one)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_fixtures(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize(("command", "what", "args", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_bad_input_is_one_clear_line(fixtures: dict[str, Path], command: str, what: str, args: list[str], expected: str,
                                      capfd) -> None:
    code, line = run_case(args, fixtures)
    assert code == 2, line
    assert "Traceback" not in line and line.count("\n") == 0, line
    assert expected in line, line


def server_rows(model: Path) -> list[str]:
    """The server's answers to tests/test_serve.py's bad requests, as table rows."""
    from test_serve import BAD, Server

    srv = Server(model, "--max-inputs", "8", "--max-body-bytes", "4096")
    rows = []
    try:
        for what, method, path, body, _, _ in BAD:
            status, answer = srv.request(method, path, body)
            shown = body if body is None or isinstance(body, bytes) or len(body) < 60 else body[:40] + "..."
            request = f"{method} {path}" + (f" `{shown!r}`" if body is not None else "")
            rows.append(f"| {what} | {request.replace('|', '/')} | {status} | `{json.dumps(answer)}` |")
    finally:
        srv.stop()
    return rows


def write_docs() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fixtures = build_fixtures(Path(tmp))
        rows = ["| command | bad input | exit | answer (one line on stderr) |", "|---|---|---|---|"]
        for command, what, args, _ in CASES:
            code, line = run_case(args, fixtures)
            rows.append(f"| `{command}` | {what} | {code} | `{line.replace(tmp, '...').replace('|', '/')}` |")
        rows += ["", "## `bertkit serve`: bad requests", "",
                 "The same server runs these as tests in `tests/test_serve.py` (a 4 KiB body limit and 8 inputs a "
                 "request there); every one leaves it healthy.", "",
                 "| bad request | request | status | answer (JSON body) |", "|---|---|---|---|"]
        rows += server_rows(fixtures["exported"])
    doc = Path(__file__).parents[1] / "docs" / "bad-inputs.md"
    doc.write_text("# Bad input, command by command\n\nGenerated by `python tests/test_bad_inputs.py` (the same cases "
                   "run as tests in `tests/test_bad_inputs.py`). Paths under the temporary folder are shown as `...`.\n\n"
                   + "\n".join(rows) + "\n", encoding="utf-8")
    print(doc)


if __name__ == "__main__":
    sys.exit(write_docs())
