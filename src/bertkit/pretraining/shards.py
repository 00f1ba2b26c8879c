"""The on-disk form of prepared data: shards written as instances stream in, and meta.json read back.

In a data folder: `meta.json` (settings, counts, shards, timings; written last), `vocab.txt` and
`tokenizer_config.json` (the vocabulary the ids belong to), and per shard `{split}-{k:05d}.ids.npy`
(uint16 when the vocabulary fits, else uint32; `[CLS] A [SEP] B [SEP]` of every instance end to
end), `.index.npy` (int64 rows: offset, length, len_a counting [CLS] and the first [SEP],
is_random_next), with static masking `.labels.npy` (the original id where a token is masked, 0
elsewhere; the ids then hold the masked input), with Chinese whole-word masking `.word_starts.npy`
(uint8, 1 where a token begins a word); with dynamic whole-word masking on WordPiece words
`continuation.npy` (bool per vocabulary id: a "##" piece). Every file is written to a temporary
name and renamed when complete.
"""

from __future__ import annotations

import contextlib
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BertkitError
from ..fileio import atomic_path, read_json
from .instances import SplitArrays

FORMAT_VERSION = 1
_OUTPUT_NAME = re.compile(r"(train|eval)-\d{5}\.(ids|index|labels|word_starts)\.npy|continuation\.npy")

def save_array(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


_NPY_HEADER_BYTES = 128  # reserved, so the header can be written last, once the shape is known


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """Gives a .npy (version 1.0) header of exactly _NPY_HEADER_BYTES bytes."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    body = text.encode("latin1")
    pad = _NPY_HEADER_BYTES - 10 - len(body) - 1
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _NPY_HEADER_BYTES - 10) + body + b" " * pad + b"\n"


class _NpyAppender:
    """A .npy file written a block of rows at a time: a temporary file, renamed into place by close()."""

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...] = ()) -> None:
        self.dtype, self.row_shape, self.rows = np.dtype(dtype), row_shape, 0
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_path(path))
        self._file = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115 - closed by close()
        self._file.write(_npy_header(self.dtype, (0, *row_shape)))

    def append(self, values: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.rows += len(values)

    def close(self) -> None:
        self._file.seek(0)
        self._file.write(_npy_header(self.dtype, (self.rows, *self.row_shape)))
        self._stack.close()  # closes the file, then fsyncs and renames it over the final name

    def discard(self) -> None:
        self._stack.__exit__(BertkitError, BertkitError("discarded"), None)  # removes the temporary file


class ShardWriter:
    """Streams one split's instances into shards of `shard_instances`: only the arriving block is in
    memory; each shard's files appear (atomically) when the shard is complete."""

    def __init__(self, out_dir: Path, split: str, shard_instances: int, dtype: np.dtype) -> None:
        self.out_dir, self.split, self.shard_instances, self.dtype = out_dir, split, shard_instances, dtype
        self.shards: list[dict[str, Any]] = []
        self._files: dict[str, _NpyAppender] = {}
        self._count = self._tokens = self._random_next = 0

    @property
    def instances(self) -> int:
        return self._count + sum(s["instances"] for s in self.shards)

    def add(self, arrays: SplitArrays | None) -> None:
        done = 0
        while arrays is not None and done < len(arrays):
            if not self._files:
                self._open(arrays)
            take = min(self.shard_instances - self._count, len(arrays) - done)
            part = arrays.slice(done, done + take)
            index = part.index.copy()
            index[:, 0] += self._tokens  # offsets within the shard
            self._files["ids"].append(part.ids)
            self._files["index"].append(index)
            if part.labels is not None:
                self._files["labels"].append(part.labels)
            if part.word_starts is not None:
                self._files["word_starts"].append(part.word_starts)
            self._count += take
            self._tokens += len(part.ids)
            self._random_next += int(part.index[:, 3].sum())
            done += take
            if self._count == self.shard_instances:
                self._close_shard()

    def close(self) -> list[dict[str, Any]]:
        if self._files:
            self._close_shard()
        return self.shards

    def discard(self) -> None:
        for f in self._files.values():
            f.discard()
        self._files = {}

    def _open(self, arrays: SplitArrays) -> None:
        name = f"{self.split}-{len(self.shards):05d}"
        kinds = {"ids": (self.dtype, ()), "index": (np.dtype(np.int64), (4,))}
        if arrays.labels is not None:
            kinds["labels"] = (self.dtype, ())
        if arrays.word_starts is not None:
            kinds["word_starts"] = (np.dtype(np.uint8), ())
        self._files = {k: _NpyAppender(self.out_dir / f"{name}.{k}.npy", dt, shape) for k, (dt, shape) in kinds.items()}

    def _close_shard(self) -> None:
        for f in self._files.values():
            f.close()
        self.shards.append({
            "name": f"{self.split}-{len(self.shards):05d}", "split": self.split, "instances": self._count,
            "tokens": self._tokens, "random_next": self._random_next,
        })  # fmt: skip
        self._files = {}
        self._count = self._tokens = self._random_next = 0


def clear(out_dir: Path) -> None:
    """Removes what an earlier prepare left in `out_dir` (meta.json first: no meta, no data)."""
    (out_dir / "meta.json").unlink(missing_ok=True)
    for p in out_dir.iterdir():
        if _OUTPUT_NAME.fullmatch(p.name) or (p.name.startswith(".") and p.name.endswith(".tmp")):
            p.unlink(missing_ok=True)


def read_meta(data_dir: Path) -> dict[str, Any]:
    path = data_dir / "meta.json"
    if not data_dir.is_dir():
        raise BertkitError(f"{data_dir}: no such folder (make one with `bertkit prepare`)")
    if not path.is_file():
        raise BertkitError(f"{data_dir}: no meta.json: not a prepared data folder, or its prepare did not finish")
    meta = read_json(path)
    if meta.get("format_version") != FORMAT_VERSION:
        version = meta.get("format_version")
        raise BertkitError(f"{path}: format_version {version!r}, expected {FORMAT_VERSION} (prepare the data again)")
    for key in ("vocab_sha256", "vocab_size", "max_seq_length", "masking", "shards", "special_ids"):
        if key not in meta:
            raise BertkitError(f"{path}: field '{key}' is missing")
    return meta
