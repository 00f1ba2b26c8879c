"""The data side of fine-tuning for the paper's four task families, behind one interface (`Task`).

    task = get_task("pair")                          # "classify" | "pair" | "qa" | "ner"
    train, dev = task.read(train_path), task.read(dev_path)
    labels = task.labels(train)
    label2id = {label: i for i, label in enumerate(labels)}
    model = MODEL_CLASSES[task.architecture](config.with_labels(labels, task.problem_type))   # bertkit.heads
    features = task.featurize(dev, tok, label2id)    # rows of ints + what decoding needs
    batches = [features.rows[i:i + 32] for i in range(0, len(features), 32)]
    outputs = [model(**to_tensors(task.collate(b, tok.pad_token_id))) for b in batches]   # in feature order
    predictions = task.decode(features, outputs)      # one per example
    scores = task.score(dev, predictions)             # {"accuracy": ..., "f1": ...}, percent

Nothing here imports torch: batches are numpy arrays, decoding reads numpy logits, so that an exported
model predicts without it (bertkit.runtime). Each task module reads its own formats (`read_table`/`read_jsonl` in `tables`, `read_squad`, `read_conll`,
all exported here); read reports (`dataset.report.summary()`) say what each skipped or fixed and where.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import BertkitError
from .base import Dataset, Family, Features, InputError, Learner, ReadReport, Task, pad_rows
from .classification import CLASSIFY, PAIR
from .classify import ClassifyTask, ClassPrediction
from .embed import EMBED
from .multilabel import LabelSetPrediction, MultiLabelTask, tune_thresholds
from .ner import NER, NERTask, TagExample, TagPrediction, read_conll, with_scheme, words_of
from .qa import QA, Answer, QAExample, QAPrediction, QATask, read_squad
from .readers import split
from .rerank import RERANK
from .tables import TextExample, read_jsonl, read_table, read_texts

# The task families, by name: a new family is a module here and one entry in this line.
FAMILIES: dict[str, Family] = {family.name: family for family in (CLASSIFY, PAIR, QA, NER, EMBED, RERANK)}
TASKS = tuple(FAMILIES)


def family(name: str) -> Family:
    """Gives the family named `name`, or a BertkitError listing the known ones."""
    if name not in FAMILIES:
        raise BertkitError(f"unknown task {name!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def get_task(name: str, **options: Any) -> Task:
    """Gives the task named "classify", "pair", "qa" or "ner", built with `options` (e.g. regression=True;
    multi_label=True gives the multi-label task of classify or pair)."""
    return family(name).build(**options)


def check_options(name: str, given: Iterable[str]) -> None:
    """BertkitError unless every option `given` (by setting name, each a fine-tuning flag) applies to the task
    family `name`."""
    for option in given:
        if option not in family(name).options:
            takers = [f.name for f in FAMILIES.values() if option in f.options]
            raise BertkitError(f"--{option.replace('_', '-')} is for {' and '.join(takers)}, not {name}")


__all__ = [
    "FAMILIES",
    "TASKS",
    "Answer",
    "ClassPrediction",
    "ClassifyTask",
    "Dataset",
    "Family",
    "Features",
    "InputError",
    "LabelSetPrediction",
    "Learner",
    "MultiLabelTask",
    "NERTask",
    "QAExample",
    "QAPrediction",
    "QATask",
    "ReadReport",
    "TagExample",
    "TagPrediction",
    "Task",
    "TextExample",
    "check_options",
    "family",
    "get_task",
    "pad_rows",
    "read_conll",
    "read_jsonl",
    "read_squad",
    "read_table",
    "read_texts",
    "split",
    "tune_thresholds",
    "with_scheme",
    "words_of",
]
