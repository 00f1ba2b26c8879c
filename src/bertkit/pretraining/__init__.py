"""BERT's pre-training data: raw text -> documents -> NSP sentence pairs -> MLM masks -> shards on disk.

The data flows one way through four files, each with one job:

| module         | job                                                                                     |
|----------------|-----------------------------------------------------------------------------------------|
| `documents`    | documents (bertkit.corpus) -> sentences of token ids, in buffers; jieba words for Chinese |
| `instances`    | Google's `create_pretraining_data.py` on those ids: sentence pairs and static masks      |
| `pipeline`     | `prepare`: the process pool that runs the two above, buffer by buffer, and meta.json      |
| `shards`       | the on-disk form: shards written as instances stream in, meta.json read back             |
| `dataset`      | `PretrainingData`: instances by index, masked (dynamically) as training reads them       |

    meta = prepare(["corpus/"], "vocab/", "data/")            # the data folder also gets vocab.txt
    data = PretrainingData("data/", "train")
    batch = collate([data.example(i, epoch=0, seed=0) for i in range(32)])

Deviations from Google's script, each for a reason, are listed in the module that makes them:
bounded memory (buffers, `documents` and `pipeline`), dropped one-sentence documents and literal
special tokens (`documents`), dynamic masking from a counter-based hash (`dataset`), Chinese whole
words from jieba (`documents`), a held-out split per buffer (`pipeline`).
"""

from .dataset import PretrainingData, collate
from .documents import tokenize_documents
from .instances import (
    InstanceSettings,
    SplitArrays,
    TokenizedDocuments,
    Vocab,
    assemble,
    create_instances,
    default_max_predictions,
    vocab_sha256,
)
from .pipeline import PrepareSettings, prepare
from .shards import FORMAT_VERSION, read_meta

__all__ = [
    "FORMAT_VERSION",
    "InstanceSettings",
    "PrepareSettings",
    "PretrainingData",
    "SplitArrays",
    "TokenizedDocuments",
    "Vocab",
    "assemble",
    "collate",
    "create_instances",
    "default_max_predictions",
    "prepare",
    "read_meta",
    "tokenize_documents",
    "vocab_sha256",
]
