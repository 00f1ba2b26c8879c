"""What `bertkit serve` serves: a fine-tuned model's task (/v1/predict, and /v1/rerank for a pair model used as a
cross-encoder), or any model as an embedder (/v1/embeddings). An adapter reads and tokenizes a request's inputs
once (`prepare`, off the event loop: the features, and the tokens the batcher's budget spends), then runs the
features of a group of requests together and gives each request its results (`run`); it warms up with its
largest batch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import BertConfig
from ..errors import BertkitError
from ..folders import TASK_FILE
from ..sentence_files import MODULES
from ..tasks import Features, Task


@dataclass(frozen=True)
class Prepared:
    """A request's inputs as its model takes them (tokenized once), and what the batcher counts of them."""

    features: Any
    size: int  # inputs
    tokens: int  # tokens of its rows (a long input's windows, or truncated), specials included


class TaskModel:
    """A fine-tuned model folder (PyTorch or exported) through its `Pipeline`: inputs -> prediction JSON."""

    def __init__(self, model_dir: Path, device: str, precision: str, max_batch_size: int, max_batch_tokens: int):
        from ..predict import Pipeline

        self.pipe = Pipeline(model_dir, device=device, precision=precision, batch_size=max_batch_size,
                             max_tokens=max_batch_tokens)
        self.task: Task = self.pipe.task
        self.max_length = getattr(self.task, "max_seq_length", 512)
        self.routes = ("/v1/predict", *(("/v1/rerank",) if self.task.reranks(self.pipe.labels) else ()))

    def info(self) -> dict[str, Any]:
        return {"task": self.task.name, "labels": self.pipe.labels, "backend": self.pipe.backend.name,
                "max_seq_length": self.max_length}

    def prepare(self, inputs: list[Any]) -> Prepared:
        """The inputs featurized as `Pipeline.predict` featurizes them; their tokens are their rows'."""
        texts, seconds = self.task.split_inputs(inputs)
        data = self.task.inputs_from_texts(texts, seconds, **self.pipe.meta.get("input_options", {}))
        features = self.task.featurize(data, self.pipe.tokenizer, self.pipe.label2id)
        return Prepared(features, len(inputs), int(features.lengths.sum()))

    def run(self, requests: list[Features]) -> list[list[dict[str, Any]]]:
        """Each request's predictions, its rows run in forward passes with the other requests' rows."""
        from ..predict import infer

        first = requests[0]
        rows = [row for features in requests for row in features.rows]
        # `infer` reads only the rows (and the pad id): the group's rows, each request decoded on its own below
        group = Features(rows, first.data, np.zeros(len(rows), np.int64), first.labels, first.pad_token_id)
        outputs = infer(self.pipe.backend, self.task, group, self.pipe.batch_size, max_tokens=self.pipe.max_tokens)
        crf = {"crf": self.pipe.backend.crf} if self.pipe.backend.crf is not None else {}
        answers, at = [], 0
        for features in requests:
            own = {name: x[at : at + len(features.rows)] for name, x in outputs.items()}
            answers.append([self.task.prediction_json(p) for p in self.task.decode(features, own, **crf)])
            at += len(features.rows)
        return answers

    def warm_up(self, batch_size: int) -> None:
        """One forward pass at the largest shape served: `batch_size` inputs of the longest length."""
        long = " ".join(["warm"] * 2 * self.max_length)  # truncated (or cut into windows) at the longest length
        if self.task.second is None:
            self.pipe([long] * batch_size)
        else:  # a short first text, a long second one (a question's context)
            self.pipe(["warm up"] * batch_size, [long] * batch_size)


class EncoderModel:
    """Any model folder's encoder (or an exported encoder) as an embedder: texts -> (vectors, tokens)."""

    routes = ("/v1/embeddings",)

    def __init__(self, model_dir: Path, pooling: str | None, normalize: bool, device: str, max_batch_size: int,
                 max_batch_tokens: int):
        """`pooling` None (and `normalize` False): what the folder's sentence-transformers files say, else mean."""
        from ..embed import Embedder

        self.embedder = Embedder(model_dir, pooling=pooling, normalize=normalize, batch_size=max_batch_size,
                                 device=device, max_tokens=max_batch_tokens)
        self.pooling, self.normalize = self.embedder.pooling, self.embedder.normalize
        self.dimensions = BertConfig.load(model_dir).hidden_size  # a vector's size, known before any request runs

    def info(self) -> dict[str, Any]:
        return {"task": "embed", "pooling": self.pooling, "normalize": self.normalize,
                "backend": self.embedder.backend.name, "max_seq_length": self.embedder.max_length}

    def prepare(self, texts: list[str]) -> Prepared:
        """The texts tokenized as `Embedder.embed` tokenizes them (truncated at the longest length)."""
        rows = self.embedder.tokenizer.encode_batch(texts, max_length=self.embedder.max_length, truncation=True)
        return Prepared(rows, len(texts), sum(len(r.ids) for r in rows))

    def run(self, requests: list[list[Any]]) -> list[tuple[np.ndarray, list[int]]]:
        """Each request's vectors, (n, hidden) float32, and its texts' tokens; the group's rows run together in
        length-sorted forward passes, as `Embedder.embed` runs a list of texts."""
        rows = [row for encoded in requests for row in encoded]
        lengths = np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))
        vectors = self.embedder.vectors_of(rows)
        answers, at = [], 0
        for encoded in requests:
            answers.append((vectors[at : at + len(encoded)], lengths[at : at + len(encoded)].tolist()))
            at += len(encoded)
        return answers

    def warm_up(self, batch_size: int) -> None:
        self.embedder.embed([" ".join(["warm"] * 2 * self.embedder.max_length)] * batch_size)


def load(model_dir: Path, pooling: str | None, normalize: bool, device: str, precision: str, max_batch_size: int,
         max_batch_tokens: int) -> TaskModel | EncoderModel:
    """The served model: a fine-tuned folder serves its task; any folder with --pooling, a folder that says its
    pooling (sentence-transformers' files: a trained embedder) and a pre-trained one (which has no task) serve as an
    embedder, pooled as its sentence-transformers files say (else mean)."""
    if pooling is None and (model_dir / TASK_FILE).is_file() and not (model_dir / MODULES).is_file():
        return TaskModel(model_dir, device, precision, max_batch_size, max_batch_tokens)
    if precision != "fp32":
        raise BertkitError("an embedder serves in fp32 (--precision is for task models)")
    return EncoderModel(model_dir, pooling, normalize, device, max_batch_size, max_batch_tokens)
