"""Shared fixtures: the real data sets in ../shared/data, next to the repository.

Tests that need them skip with the reason where the folder is absent, except under CI (CI=true),
where its absence fails the run at once: CI must run every test.
"""

import os
import sys
from pathlib import Path

import pytest

# Tests never reach the Hugging Face Hub: huggingface_hub reads this once, when first imported.
os.environ["HF_HUB_OFFLINE"] = "1"

SHARED_DATA = Path(__file__).parents[1] / ".." / "shared" / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--without-bench", action="store_true",
                     help="leave out the tests of bench/'s own code (test_bench*.py): the fast tier imports nothing "
                          "from bench/")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("--without-bench") and collection_path.name.startswith("test_bench"):
        return True
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """With --without-bench, a test module that imports bench/ anyway fails the run: it would tie the tier to bench/."""
    if session.config.getoption("--without-bench"):
        leaked = sorted(m for m in sys.modules if m == "bench" or m.startswith("bench."))
        if leaked:
            raise pytest.UsageError(f"--without-bench, yet collecting the tests imported {', '.join(leaked)}")


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("CI") == "true" and not SHARED_DATA.is_dir():
        raise pytest.UsageError(f"CI=true, but the shared data sets are missing at {SHARED_DATA.resolve()}: "
                                "the tests that read them would only skip")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Gives the shared data folder; skips the test when it is absent (outside CI)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data sets at {SHARED_DATA.resolve()} (absent here)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def builtin_data() -> Path:
    """The package's built-in English task files ({classify,pair,qa,ner}/{train,dev}): small real samples that
    every clone has, so that fine-tuning tests run without ../shared."""
    from bertkit.demo.run import data_dir

    return data_dir("en")


@pytest.fixture(scope="session")
def vocab(tmp_path_factory: pytest.TempPathFactory, builtin_data: Path) -> Path:
    """A folder with a WordPiece vocabulary of 2,000 pieces learnt once per session from the built-in
    classification sentences: the tiny models' vocabulary (small, so their embeddings train fast)."""
    from bertkit import Tokenizer

    lines = (builtin_data / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    folder = tmp_path_factory.mktemp("vocab")
    Tokenizer.train([line.split("\t")[0] for line in lines], 2000).save_pretrained(folder)
    return folder


@pytest.fixture
def make_tiny_model(tmp_path: Path, vocab: Path):
    """Gives a function that saves a randomly initialized (seed 0) tiny BERT with the session's vocabulary, as a
    pre-trained model folder; its keyword arguments override config fields (the dropout rates, say)."""
    import torch

    import bertkit
    from bertkit import BertConfig, Tokenizer

    def make(**overrides: float) -> Path:
        tok = Tokenizer.from_pretrained(vocab)
        torch.manual_seed(0)
        out = tmp_path / "-".join(["tiny", *(f"{k}={v}" for k, v in sorted(overrides.items()))])
        bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size, **overrides)).save_pretrained(out)
        tok.save_pretrained(out)
        return out

    return make


@pytest.fixture
def tiny_model(make_tiny_model) -> Path:
    """A randomly initialized tiny BERT with the session's vocabulary, saved like a pre-trained model."""
    return make_tiny_model()


@pytest.fixture(scope="session")
def task_models(tmp_path_factory: pytest.TempPathFactory, vocab: Path) -> dict[str, Path]:
    """Tiny models of every task family (and a pre-trained encoder, "encoder"), each a complete model folder
    with its task file, as `bertkit finetune` writes it; the session's vocabulary (`vocab`).
    The heads' weights are scaled up, so that predictions are decisive (no near-ties between labels)."""
    import json

    import torch

    import bertkit
    from bertkit import BertConfig, Tokenizer

    root = tmp_path_factory.mktemp("task-models")
    torch.manual_seed(0)  # the CRF's transitions start random at construction
    tok = Tokenizer.from_pretrained(vocab)
    base = BertConfig.preset("tiny", vocab_size=tok.vocab_size)
    tags = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    specs = {  # name: (model, task, labels, task options)
        "encoder": (bertkit.BertForPreTraining(base), None, None, {}),
        "classify": (bertkit.BertForSequenceClassification(base.with_labels(["emma", "moby", "thursday"])), "classify",
                     ["emma", "moby", "thursday"], {}),
        "pair": (bertkit.BertForSequenceClassification(base.with_labels(["entailment", "not_entailment"])), "pair",
                 ["entailment", "not_entailment"], {}),
        "regression": (bertkit.BertForSequenceClassification(base.with_labels(["score"], "regression")), "pair",
                       ["score"], {"regression": True}),
        "multilabel": (bertkit.BertForSequenceClassification(base.with_labels(["food", "money", "sport"], "multi_label_classification")),
                       "classify", ["food", "money", "sport"], {"multi_label": True}),
        "qa": (bertkit.BertForQuestionAnswering(base.with_labels(["start", "end"])), "qa", ["start", "end"],
               {"max_seq_length": 64, "doc_stride": 16}),
        "ner": (bertkit.BertForTokenClassification(base.with_labels(tags)), "ner", tags, {}),
        "ner-crf": (bertkit.BertForTokenClassification(base.with_labels(tags).replace(crf=True)), "ner", tags,
                    {"crf": True}),
        "ner-constrained": (bertkit.BertForTokenClassification(base.with_labels(tags)), "ner", tags, {"constrained": True}),
    }  # fmt: skip
    folders = {}
    for seed, (name, (model, task, labels, options)) in enumerate(specs.items()):
        torch.manual_seed(seed)
        model.init_weights()
        with torch.no_grad():
            for part in ("classifier", "qa_outputs"):
                if hasattr(model, part):
                    for p in getattr(model, part).parameters():
                        p.mul_(40.0)
        folder = root / name
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        if task is not None:
            meta = {"task": task, "labels": labels, "task_options": options, "input_options": {}}
            (folder / "bertkit_task.json").write_text(json.dumps(meta), encoding="utf-8")
        folders[name] = folder
    return folders
