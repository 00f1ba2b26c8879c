"""`bertkit embed`: sentence embeddings from any BERT, at inference speed.

    bertkit embed --model ../shared/data/models/all-MiniLM-L6-v2 --pooling mean --normalize "a cat" "a dog"
    bertkit embed --model DIR --file sentences.txt --out sentences.npy

One vector per text from the encoder's last layer: `mean` (the attention-masked mean of the token vectors,
as sentence-transformers' MiniLM was trained for), `cls` (the [CLS] vector), or `pooler` (the pooler's
tanh layer, which NSP trained); `--normalize` scales each to length 1, so that dot products are cosines.
Texts run in length-sorted batches, so a large file goes at the speed of inference. Any model folder
works: a pre-trained or fine-tuned one (its encoder), a Hugging Face BertModel, or an exported encoder.
A folder with sentence-transformers' files (bertkit.sentence_files) says its own pooling, normalization
and length, and gives the vectors SentenceTransformer gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .errors import BertkitError
from .folders import architecture_of, is_exported
from .runtime import INPUTS, OnnxBackend, TorchBackend, batches
from .sentence_files import read_sentence_config
from .tokenizer import Tokenizer

POOLINGS = ("mean", "cls", "pooler")


class Embedder:
    """An encoder and its tokenizer: texts in, one vector each out, as a (N, hidden) float32 array."""

    def __init__(self, model_dir: str | Path, pooling: str | None = None, normalize: bool = False, batch_size: int = 64,
                 max_length: int | None = None, device: str = "auto", max_tokens: int | None = None):
        """`pooling` None: what the folder's sentence-transformers files say, else mean; they can also turn
        `normalize` on, and set `max_length` (else the tokenizer's limit, else the model's)."""
        model_dir = Path(model_dir)
        declared = read_sentence_config(model_dir)
        pooling = pooling or (declared.pooling if declared else "mean")
        if pooling not in POOLINGS:
            raise BertkitError(f"--pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        normalize = normalize or bool(declared and declared.normalize)
        max_length = max_length or (declared.max_seq_length if declared else None)
        self.tokenizer = Tokenizer.from_pretrained(model_dir)
        max_length = max_length or self.tokenizer.model_max_length
        self.pooling, self.normalize, self.batch_size, self.max_tokens = pooling, normalize, batch_size, max_tokens
        if is_exported(model_dir):
            if architecture_of(model_dir) != "BertModel":
                raise BertkitError(f"{model_dir}: an exported task model; export the pre-trained encoder to embed with it")
            self.backend: Any = OnnxBackend(model_dir)
            self.max_length = max_length or 512
        else:
            import torch

            from .model import BertModel

            encoder = BertModel.from_pretrained(model_dir)  # a task model's encoder, its head left out
            if pooling == "pooler" and any(n.startswith("pooler.") for n in encoder.load_report.newly_initialized):
                raise BertkitError(f"{model_dir}: has no trained pooler (a QA or tagging model's encoder): use "
                                   "--pooling mean or cls")
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self.backend = TorchBackend(encoder.to(torch.device(device)))
            self.max_length = max_length or encoder.config.max_position_embeddings
        self.outputs = ("pooler_output",) if pooling == "pooler" else ("last_hidden_state",)

    def __call__(self, texts: str | Sequence[str], progress: bool = False) -> np.ndarray:
        """Gives the texts' vectors, (N, hidden), in the texts' order."""
        return self.embed(texts, progress)[0]

    def embed(self, texts: str | Sequence[str], progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Gives the texts' vectors, (N, hidden), in the texts' order, and each text's tokens (as truncated)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise BertkitError("no texts to embed")
        rows = self.tokenizer.encode_batch(texts, max_length=self.max_length, truncation=True)
        return self.vectors_of(rows, progress), np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))

    def vectors_of(self, rows: Sequence[Any], progress: bool = False) -> np.ndarray:
        """Gives the vectors, (N, hidden), of texts already tokenized (`Tokenizer.encode_batch`'s rows, truncated
        at `max_length`), in their order: run in length-sorted batches, pooled, normalized if asked."""
        lengths = np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))
        out: np.ndarray | None = None
        for idx in tqdm(batches(lengths, self.batch_size, self.backend.pads, self.max_tokens), disable=not progress, desc="embed",
                        unit="batch", leave=False):
            batch = self._pad([rows[i] for i in idx])
            result = self.backend.run(batch, self.outputs)[self.outputs[0]]
            vectors = self._pool(result, batch["attention_mask"])
            if out is None:
                out = np.zeros((len(rows), vectors.shape[1]), np.float32)
            out[idx] = vectors
        assert out is not None
        if self.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def _pad(self, rows: list[Any]) -> dict[str, np.ndarray]:
        T = max(len(r.ids) for r in rows)
        batch = {k: np.zeros((len(rows), T), np.int64) for k in INPUTS}
        for i, r in enumerate(rows):
            n = len(r.ids)
            batch["input_ids"][i, :n], batch["token_type_ids"][i, :n], batch["attention_mask"][i, :n] = r.ids, r.token_type_ids, 1
        batch["input_ids"][batch["attention_mask"] == 0] = self.tokenizer.pad_token_id
        return batch

    def _pool(self, output: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.pooling == "pooler":
            return output
        if self.pooling == "cls":
            return output[:, 0]
        weights = mask[..., None].astype(np.float32)  # (B, T, 1)
        return (output * weights).sum(1) / np.maximum(weights.sum(1), 1.0)
