"""`prepare`: raw text -> BERT's pre-training data on disk, spread over a pool of processes.

The main process reads documents into buffers (bertkit.pretraining.documents); a process pool
tokenizes each buffer in chunks, then makes the buffer's instances (bertkit.pretraining.instances);
the main process streams them into shards in buffer order (bertkit.pretraining.shards). Each buffer
is one call of Google's `create_training_instances` (shuffle the documents, `dupe_factor` passes,
shuffle the instances) with its own `random.Random`; the first buffer's training part uses
`random.Random(seed)` itself, so a corpus that fits one buffer (with eval_fraction=0) gives Google's
output exactly. The held-out evaluation split is a share of each buffer's documents; its instances
are made once (no `dupe_factor`). Every random choice depends on the seed and the buffer's number
only, so the output is the same for any number of workers. Memory is bounded by a buffer or two,
whatever the corpus size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..corpus import iter_documents
from ..errors import BertkitError
from ..fileio import ReadReport, atomic_write_text, list_files
from ..settings import Check, Settings, one_of, option, positive
from ..tokenizer import Tokenizer
from .documents import buffers, jieba_module, resolve_lang, tokenize_documents
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
from .shards import FORMAT_VERSION, ShardWriter, clear, save_array

if TYPE_CHECKING:
    from ..corpus import Document

LANGS = ("auto", "en", "zh")
BUFFER_MB = 8.0  # text per buffer (~1.4M English words): the pool random-next documents come from
BUFFER_DOCUMENTS = 50_000
SHARD_INSTANCES = 100_000
MIN_EVAL_DOCUMENTS = 10  # the evaluation split of a small corpus still gets this many (at most 5%)


# ---- the work of the pool: tokenize chunks of documents, make a buffer's instances -----------------------


@dataclass(frozen=True)
class JobConfig:
    """What every task of one prepare shares."""

    vocab_dir: str
    settings: InstanceSettings
    seed: int
    eval_fraction: float
    jieba: bool  # Chinese whole-word masking: word starts from jieba


_TOKENIZERS: dict[str, tuple[Tokenizer, Vocab]] = {}  # per process: vocab_dir -> loaded tokenizer


def _tokenizer(vocab_dir: str) -> tuple[Tokenizer, Vocab]:
    if vocab_dir not in _TOKENIZERS:
        tok = Tokenizer.from_pretrained(vocab_dir)
        _TOKENIZERS[vocab_dir] = (tok, Vocab.of(tok))
    return _TOKENIZERS[vocab_dir]


def _tokenize_task(config: JobConfig, docs: list[Document]) -> tuple[TokenizedDocuments, Counter[str]]:
    tok, vocab = _tokenizer(config.vocab_dir)
    return tokenize_documents(docs, tok, vocab, config.jieba, config.settings.max_seq_length)


def _derive_seed(seed: int, *parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr((seed, *parts)).encode()).digest()[:8], "little")


def _eval_documents(n: int, fraction: float, first: bool, rng: random.Random) -> list[int]:
    """Gives which of a buffer's n documents are held out: none, or at least 2 (NSP needs two)."""
    if fraction <= 0 or n < 20:
        return []
    k = max(2, round(fraction * n))
    if first:
        k = max(k, min(MIN_EVAL_DOCUMENTS, n // 20))
    return sorted(rng.sample(range(n), k))


def _pool_instances(flat: TokenizedDocuments, settings: InstanceSettings, vocab: Vocab,
                    rng: random.Random) -> SplitArrays | None:  # fmt: skip
    if flat.num_documents < 2:  # no other document to draw a random next segment from
        return None
    inst, order = create_instances(flat, settings, vocab, rng)
    return assemble(flat, inst, order, vocab, settings.static_masking)


def buffer_instances(
    config: JobConfig, index: int, flat: TokenizedDocuments
) -> tuple[SplitArrays | None, SplitArrays | None, Counter[str]]:
    """Gives buffer `index`'s train and eval instances: hold out documents, then Google's algorithm."""
    _, vocab = _tokenizer(config.vocab_dir)
    rng = random.Random(_derive_seed(config.seed, "eval-documents", index))
    held = _eval_documents(flat.num_documents, config.eval_fraction, index == 0, rng)
    held_set = set(held)
    train_flat = flat.subset([d for d in range(flat.num_documents) if d not in held_set]) if held else flat
    # The first buffer draws from random.Random(seed) itself, as Google's script does.
    train_rng = random.Random(config.seed if index == 0 else _derive_seed(config.seed, "train", index))
    train = _pool_instances(train_flat, config.settings, vocab, train_rng)
    evals = None
    if held:  # evaluation instances are made once: no dupe_factor
        eval_settings = dataclasses.replace(config.settings, dupe_factor=1)
        evals = _pool_instances(flat.subset(held), eval_settings, vocab,
                                random.Random(_derive_seed(config.seed, "eval", index)))  # fmt: skip
    counts = Counter({"documents_eval": len(held)})
    if train is None:
        counts["skipped_documents_alone_in_buffer"] = train_flat.num_documents
    return train, evals, counts


class _InlinePool:
    """The Pool calls prepare uses, run in this process (workers <= 1)."""

    class _Done:
        def __init__(self, value: Any) -> None:
            self.value = value

        def ready(self) -> bool:
            return True

        def get(self) -> Any:
            return self.value

    def apply_async(self, fn: Any, args: tuple[Any, ...]) -> _InlinePool._Done:
        return self._Done(fn(*args))

    def terminate(self) -> None:
        pass

    def join(self) -> None:
        pass


def _pool(n: int) -> Any:
    """Gives a process pool whose workers start from a clean process (forkserver, else spawn), or the in-process
    stand-in for n <= 1. Never forked from the caller: a caller with threads (PyTorch's, tokenizers', a test
    runner's) can hold a lock at the fork, and the child inherits it held and hangs, with the pool waiting on it
    for ever (a CI run stalled so)."""
    if n <= 1:
        return _InlinePool()
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with _main_script_hidden():
        return context.Pool(n, initializer=_worker_init)


@contextlib.contextmanager
def _main_script_hidden() -> Iterator[None]:
    """Starts workers that do not import the caller's script. A fresh worker imports the `__main__` module it is
    told of (its path or module name), so that functions defined there can be unpickled; the pool runs bertkit's
    functions only, and a script calling prepare without the `if __name__ == "__main__":` guard would call it again
    in every worker, which fails, and the pool would restart its workers for ever."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _worker_init() -> None:
    # One worker per core: Rust's own thread pool would only oversubscribe (and warns after a fork).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


@dataclass
class _BufferJob:
    """A buffer on its way through the pool: tokenizing chunks, then making instances."""

    index: int
    nbytes: int
    chunks: list[Any]  # AsyncResults of _tokenize_task
    instances: Any = None  # AsyncResult of buffer_instances, once the chunks are done
    counts: Counter[str] = field(default_factory=Counter)

    def promote(self, pool: Any, config: JobConfig) -> None:
        """Joins the tokenized chunks and hands the buffer to instance making."""
        parts = [c.get() for c in self.chunks]
        self.chunks = []
        for _, counts in parts:
            self.counts.update(counts)
        flat = TokenizedDocuments.concat([flat for flat, _ in parts])
        self.instances = pool.apply_async(buffer_instances, (config, self.index, flat))


def _chunks(docs: list[Document], size: int) -> Iterator[list[Document]]:
    chunk: list[Document] = []
    n = 0
    for doc in docs:
        chunk.append(doc)
        n += doc.nbytes
        if n >= size:
            yield chunk
            chunk, n = [], 0
    if chunk:
        yield chunk


# ---- prepare ----------------------------------------------------------------------------------------------


def _peak_rss_mb() -> dict[str, float]:
    """Gives the peak resident memory of this process and of its largest finished child, in MB."""
    import resource

    kib = 1024 if sys.platform != "darwin" else 1024 * 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib
    return {"main": round(own, 1), "largest_worker": round(child, 1)}


@dataclass
class _Run:
    """One prepare's moving parts: the pool, the buffers in flight, the shard writers, the counts."""

    config: JobConfig | None
    pool: Any
    writers: dict[str, ShardWriter]
    bar: Any
    max_in_flight: int
    chunk_bytes: int
    counts: Counter[str] = field(default_factory=Counter)
    jobs: deque[_BufferJob] = field(default_factory=deque)

    @classmethod
    def start(cls, out_dir: Path, dtype: np.dtype, n_workers: int, total: int | None, cfg: PrepareSettings) -> _Run:
        from tqdm import tqdm

        return cls(
            config=None, pool=_pool(n_workers),
            writers={split: ShardWriter(out_dir, split, cfg.shard_instances, dtype) for split in ("train", "eval")},
            bar=tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1000, desc="prepare", disable=not cfg.progress),
            max_in_flight=1, chunk_bytes=max(2**16, int(cfg.buffer_mb * 1e6 / max(4 * n_workers, 1))),
        )  # fmt: skip

    def make(self, docs: Iterator[Document], report: ReadReport, config: JobConfig, cfg: PrepareSettings) -> str:
        """Runs every buffer of `docs` through the pool into the shards, in order; gives the language found. The
        job's config is fixed at the first buffer, whose text decides the language (and so jieba words)."""
        lang = cfg.lang
        try:
            for k, (buffer, nbytes) in enumerate(buffers(docs, cfg.buffer_mb * 1e6, cfg.buffer_documents)):
                if self.config is None:
                    lang = resolve_lang(cfg.lang, buffer)
                    jieba = cfg.whole_word_masking and lang == "zh"
                    if jieba:
                        jieba_module()
                    self.config = dataclasses.replace(config, jieba=jieba)
                self.submit(k, buffer, nbytes)
            if self.config is not None:
                self.advance(0)
            self.bar.update(max(0, report.bytes - self.bar.n))  # buffers count text; the bar ends at the bytes read
        except BaseException:
            for writer in self.writers.values():  # no half-written shard: remove the temporary files
                writer.discard()
            raise
        finally:
            self.pool.terminate()
            self.pool.join()
            self.bar.close()
        return lang

    def submit(self, index: int, docs: list[Document], nbytes: int) -> None:
        assert self.config is not None
        chunks = [self.pool.apply_async(_tokenize_task, (self.config, c)) for c in _chunks(docs, self.chunk_bytes)]
        self.jobs.append(_BufferJob(index, nbytes, chunks))
        self.advance(self.max_in_flight)

    def advance(self, limit: int) -> None:
        """Moves finished tokenization on to instance making; writes the oldest buffers (in order)
        until no more than `limit` are in flight."""
        assert self.config is not None
        for job in self.jobs:
            if job.instances is None and all(c.ready() for c in job.chunks):
                job.promote(self.pool, self.config)
        while len(self.jobs) > limit:
            job = self.jobs[0]
            if job.instances is None:
                job.promote(self.pool, self.config)
            train, evals, counts = job.instances.get()
            self.jobs.popleft()
            self.writers["train"].add(train)
            self.writers["eval"].add(evals)
            self.counts.update(job.counts)
            self.counts.update(counts)
            self.bar.update(job.nbytes)
            self.bar.set_postfix(instances=self.writers["train"].instances + self.writers["eval"].instances)


@dataclass(frozen=True)
class PrepareSettings(Settings):
    """How `prepare` reads a corpus and makes its instances; each field with help is a flag of `bertkit prepare`."""

    max_seq_length: int = option(128, "tokens an instance, specials included")
    short_seq_prob: float = option(0.1, "share of instances given a shorter random length (Google's)")
    masked_lm_prob: float = option(0.15, "share of tokens masked")
    max_predictions_per_seq: int | None = option(None, "masked tokens an instance, at most",
                                                 shows="ceil(max_seq_length x masked_lm_prob), Google's 20 for 128")
    whole_word_masking: bool = option(False, "mask whole words: '##' pieces with their word (Chinese: jieba words)")
    static_masking: bool = option(False, "draw the masks once here (default: anew every epoch, as training reads them)")
    dupe_factor: int | None = option(None, "passes over the data, each with its own masks",
                                     shows="10 with --static-masking, else 1")
    eval_fraction: float = option(0.01, "share of documents held out for evaluation (0: none)",
                                  check=Check(lambda v: 0 <= v < 1, "must be in [0, 1)"))
    seed: int = option(12345, "seeds every random choice; the output does not depend on --workers")
    input_format: str = option("auto", "how files hold documents (auto: by each file; see bertkit.corpus)",
                               flag="--format", check=one_of("auto", "google", "lines", "paragraphs", "jsonl"))
    text_field: str = option("text", "JSON lines: the field holding the text")
    lang: str = option("auto", "sentence splitting rules; zh with --whole-word-masking uses jieba", check=one_of(*LANGS))
    on_error: str = option("skip", "bad files and lines: skip and count them, or stop", check=one_of("skip", "stop"))
    workers: int | None = option(None, "processes that tokenize and make instances (<= 1: in this one)",
                                 shows="all cores")
    shard_instances: int = option(SHARD_INSTANCES, check=positive)  # instances a shard file
    buffer_mb: float = option(BUFFER_MB, check=positive)  # the text a random next document is drawn from ...
    buffer_documents: int = option(BUFFER_DOCUMENTS, check=Check(lambda v: v >= 2, "must be at least 2"))  # ... at most
    progress: bool = True  # a progress bar (MB/s), and a summary on stderr

    def instances(self) -> InstanceSettings:
        """How sentence pairs and masks are made, the defaults resolved."""
        return InstanceSettings(
            max_seq_length=self.max_seq_length, short_seq_prob=self.short_seq_prob, masked_lm_prob=self.masked_lm_prob,
            max_predictions_per_seq=self.max_predictions_per_seq or default_max_predictions(self.max_seq_length,
                                                                                            self.masked_lm_prob),
            whole_word_masking=self.whole_word_masking, static_masking=self.static_masking,
            dupe_factor=self.dupe_factor if self.dupe_factor is not None else (10 if self.static_masking else 1),
        )  # fmt: skip


def prepare(inputs: Sequence[str | Path], vocab_dir: str | Path, out_dir: str | Path,
            settings: PrepareSettings | None = None, **options: Any) -> dict[str, Any]:
    """Gives the meta of the pre-training data it writes to `out_dir`: instances made from raw text.

    Args:
        inputs: text files (.txt, .gz, .jsonl) and folders (read recursively, sorted).
        vocab_dir: a folder with vocab.txt (and tokenizer_config.json): the tokenizer.
        out_dir: where the shards, meta.json and the vocabulary (vocab.txt, tokenizer_config.json) go; an
            earlier prepare's files there are replaced.
        settings: how (`PrepareSettings`; its defaults are Google's flags'); `options` change its fields, e.g.
            prepare(files, "vocab", "data", max_seq_length=512, whole_word_masking=True).
    """
    t_start = time.perf_counter()
    cfg = dataclasses.replace(settings or PrepareSettings(), **options)
    inputs, out_dir = [Path(p) for p in inputs], Path(out_dir)
    instance_settings = cfg.instances()
    tok, vocab = _tokenizer(str(Path(vocab_dir)))
    if cfg.static_masking and 0 not in tok.all_special_ids:
        raise BertkitError(f"{vocab_dir}: static masking stores label 0 for 'no prediction', but id 0 is not a special token")
    files = list_files(inputs)  # a missing input fails here, before anything is removed
    out_dir.mkdir(parents=True, exist_ok=True)
    clear(out_dir)

    report = ReadReport(unit="document(s)")
    docs = iter_documents(files, input_format=cfg.input_format, text_field=cfg.text_field, on_error=cfg.on_error,
                          report=report)
    n_workers = (os.cpu_count() or 1) if cfg.workers is None else cfg.workers
    total = None if any(f.suffix == ".gz" for f in files) else sum(f.stat().st_size for f in files)
    run = _Run.start(out_dir, np.dtype(vocab.dtype), n_workers, total, cfg)
    lang = run.make(docs, report, JobConfig(str(Path(vocab_dir)), instance_settings, cfg.seed, cfg.eval_fraction,
                                            jieba=False), cfg)
    shards = run.writers["train"].close() + run.writers["eval"].close()
    if not any(s["split"] == "train" for s in shards):
        clear(out_dir)
        first = f"; first problem: {report.messages[0]}" if report.messages else ""
        raise BertkitError(
            f"{', '.join(map(str, inputs))}: no training instances: NSP needs at least two documents of two or "
            f"more sentences ({run.counts['documents']} found, {run.counts['skipped_documents_one_sentence']} "
            f"of one sentence); {report.summary()}{first}"
        )
    jieba = run.config is not None and run.config.jieba
    if cfg.whole_word_masking and not cfg.static_masking and not jieba:
        save_array(out_dir / "continuation.npy", vocab.continuation)  # the "##" pieces: dynamic masking's words
    tok.save_pretrained(out_dir)  # the folder carries its vocabulary: pre-training and its model read it there
    elapsed = time.perf_counter() - t_start
    meta = {
        "format_version": FORMAT_VERSION,
        "vocab_sha256": vocab_sha256(tok),
        "vocab_size": vocab.size,
        "do_lower_case": tok.do_lower_case,
        "special_ids": {"pad": vocab.pad_id, "cls": vocab.cls_id, "sep": vocab.sep_id, "mask": vocab.mask_id},
        "dtype": np.dtype(vocab.dtype).name,
        "max_seq_length": instance_settings.max_seq_length,
        "short_seq_prob": instance_settings.short_seq_prob,
        "masking": _masking_meta(instance_settings, jieba),
        "lang": lang,
        "seed": cfg.seed,
        "eval_fraction": cfg.eval_fraction,
        "input_format": cfg.input_format,
        "buffer": {"mb": cfg.buffer_mb, "documents": cfg.buffer_documents},
        "inputs": [str(p) for p in inputs],
        "files": len(files),
        "counts": _counts_meta(run.counts, shards),
        "read": report.to_dict(),
        "shards": shards,
        "timings": {"seconds": round(elapsed, 3), "mb_per_s": round(report.bytes / 1e6 / max(elapsed, 1e-9), 3),
                    "workers": n_workers, "peak_rss_mb": _peak_rss_mb()},
    }
    atomic_write_text(out_dir / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    if cfg.progress:
        _print_summary(meta, report, run.counts, out_dir, elapsed)
    return meta


def _print_summary(meta: dict[str, Any], report: ReadReport, counts: Counter[str], out_dir: Path, elapsed: float) -> None:
    n = meta["counts"]["instances"]
    dropped = ", ".join(f"{v} {k.removeprefix('skipped_').replace('_', ' ')}" for k, v in sorted(counts.items())
                        if k.startswith("skipped_") and v)  # fmt: skip
    print(f"bertkit prepare: {report.summary()}{f'; skipped {dropped}' if dropped else ''}; {n['train']} train + "
          f"{n['eval']} eval instances in {elapsed:.1f}s ({meta['timings']['mb_per_s']:.2f} MB/s) -> {out_dir}",
          file=sys.stderr)  # fmt: skip


def _masking_meta(settings: InstanceSettings, jieba: bool) -> dict[str, Any]:
    return {
        "mode": "static" if settings.static_masking else "dynamic",
        "masked_lm_prob": settings.masked_lm_prob,
        "max_predictions_per_seq": settings.max_predictions_per_seq,
        "whole_word_masking": settings.whole_word_masking,
        "words": ("jieba" if jieba else "wordpiece") if settings.whole_word_masking else None,
        "dupe_factor": settings.dupe_factor,
        "random_token": "uniform over the whole vocabulary, as Google",
    }


def _counts_meta(counts: Counter[str], shards: list[dict[str, Any]]) -> dict[str, Any]:
    per_split = {split: [s for s in shards if s["split"] == split] for split in ("train", "eval")}
    return {
        **{k: counts[k] for k in sorted(counts)},
        "instances": {split: sum(s["instances"] for s in v) for split, v in per_split.items()},
        "instance_tokens": {split: sum(s["tokens"] for s in v) for split, v in per_split.items()},
        "random_next": {split: sum(s["random_next"] for s in v) for split, v in per_split.items()},
    }
