"""Pre-training data: Google's instances exactly, masking statistics, storage, dynamic masks, bad input.

The reference is a transcription of google-research/bert `create_pretraining_data.py` (master, with
`do_whole_word_mask`), run on token strings with the same `random.Random(seed)`: our instances must
equal its instances one for one.
"""

from __future__ import annotations

import collections
import itertools
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.pretraining import (
    InstanceSettings,
    PretrainingData,
    SplitArrays,
    TokenizedDocuments,
    Vocab,
    assemble,
    collate,
    create_instances,
    default_max_predictions,
    prepare,
)
from bertkit.tokenizer import Tokenizer

# ---- Google's create_pretraining_data.py, transcribed (the reference) --------------------------------


def google_training_instances(all_documents, max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob,
                              max_predictions_per_seq, vocab_words, rng, do_whole_word_mask=False):  # fmt: skip
    all_documents = [d for d in all_documents if d]
    rng.shuffle(all_documents)
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(google_instances_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_words, rng, do_whole_word_mask))  # fmt: skip
    rng.shuffle(instances)
    return instances


def google_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                                   max_predictions_per_seq, vocab_words, rng, do_whole_word_mask):  # fmt: skip
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk, current_length, i = [], 0, 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for j in range(a_end) for t in current_chunk[j]]
                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1 and len(tokens_b) >= 1
                tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels = google_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, do_whole_word_mask)
                instances.append({"tokens": tokens, "segment_ids": segment_ids, "is_random_next": is_random_next,
                                  "positions": positions, "labels": labels})  # fmt: skip
            current_chunk, current_length = [], 0
        i += 1
    return instances


def google_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, do_whole_word_mask):
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token == "[CLS]" or token == "[SEP]":
            continue
        if do_whole_word_mask and len(cand_indexes) >= 1 and token.startswith("##"):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))  # noqa: RUF046
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        if any(index in covered_indexes for index in index_set):
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = "[MASK]"
            elif rng.random() < 0.5:
                masked_token = tokens[index]
            else:
                masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append((index, tokens[index]))
    masked_lms.sort()
    return output_tokens, [p for p, _ in masked_lms], [label for _, label in masked_lms]


def google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


# ---- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def en_vocab(shared_data: Path) -> Path:
    return shared_data / "models" / "all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def en_tok(en_vocab: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(en_vocab)


@pytest.fixture(scope="session")
def zh_vocab(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("zh_vocab")
    shutil.copy(shared_data / "vocab" / "bert-base-chinese-vocab.txt", folder / "vocab.txt")
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    return folder


def brown_documents(shared_data: Path, n: int) -> list[list[str]]:
    """Gives the first n documents of the Brown corpus (Google's format) as lists of lines."""
    docs: list[list[str]] = [[]]
    for line in (shared_data / "pretrain" / "en" / "brown.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            docs[-1].append(line.strip())
        elif docs[-1]:
            if len(docs) == n:
                break
            docs.append([])
    return docs


@pytest.fixture(scope="session")
def brown_file(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("brown") / "brown60.txt"
    path.write_text("\n\n".join("\n".join(d) for d in brown_documents(shared_data, 60)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def brown_data(brown_file: Path, en_vocab: Path, tmp_path_factory: pytest.TempPathFactory) -> PretrainingData:
    """60 Brown documents (~155k tokens), dynamic masking."""
    out = tmp_path_factory.mktemp("brown_data")
    prepare([brown_file], en_vocab, out, workers=1, progress=False)
    return PretrainingData(out)


def instance(data: PretrainingData, i: int) -> tuple[np.ndarray, int, int]:
    """Gives the stored (unmasked, for dynamic data) ids of instance i, its len_a and is_random_next."""
    s = int(np.searchsorted(data._starts, i, side="right")) - 1
    arrays = data._shard(s)
    offset, n, len_a, random_next = arrays["index"][i - data._starts[s]].tolist()
    return np.asarray(arrays["ids"][offset : offset + n], dtype=np.int64), len_a, random_next


# ---- exactly Google's instances ---------------------------------------------------------------------------


def compare_with_google(ours, google, tok: Tokenizer) -> None:
    assert len(ours) == len(google)
    for j, ref in enumerate(google):
        offset, n, len_a, random_next = ours.index[j].tolist()
        ids = ours.ids[offset : offset + n].astype(np.int64)
        labels = ours.labels[offset : offset + n].astype(np.int64)
        assert tok.convert_ids_to_tokens(ids.tolist()) == ref["tokens"], f"instance {j}"
        assert [0] * len_a + [1] * (n - len_a) == ref["segment_ids"], f"instance {j}"
        assert bool(random_next) == ref["is_random_next"], f"instance {j}"
        assert np.flatnonzero(labels).tolist() == ref["positions"], f"instance {j}"
        assert tok.convert_ids_to_tokens(labels[labels != 0].tolist()) == ref["labels"], f"instance {j}"


@pytest.mark.parametrize("whole_word", [False, True])
@pytest.mark.parametrize("max_seq_length, short_seq_prob", [(128, 0.1), (64, 0.5)])
def test_instances_equal_googles(shared_data, en_tok, whole_word, max_seq_length, short_seq_prob):
    docs = brown_documents(shared_data, 12)
    token_docs = [[en_tok.tokenize(line) for line in doc] for doc in docs]
    settings = InstanceSettings(max_seq_length=max_seq_length, short_seq_prob=short_seq_prob, dupe_factor=2,
                                max_predictions_per_seq=default_max_predictions(max_seq_length, 0.15),
                                whole_word_masking=whole_word, static_masking=True)  # fmt: skip
    vocab = Vocab.of(en_tok)
    flat = TokenizedDocuments.from_lists([[en_tok.convert_tokens_to_ids(s) for s in d] for d in token_docs])
    inst, order = create_instances(flat, settings, vocab, random.Random(12345))
    ours = assemble(flat, inst, order, vocab, static=True)
    vocab_words = [t for t, _ in sorted(en_tok.vocab.items(), key=lambda kv: kv[1])]
    google = google_training_instances(token_docs, max_seq_length, 2, short_seq_prob, 0.15,
                                       settings.max_predictions_per_seq, vocab_words, random.Random(12345),
                                       do_whole_word_mask=whole_word)  # fmt: skip
    compare_with_google(ours, google, en_tok)


def test_prepare_equals_google_end_to_end(brown_file, en_vocab, en_tok, tmp_path):
    """A file in Google's format through prepare (static masks, one buffer, no held-out part) gives
    Google's script's instances, in its order."""
    meta = prepare([brown_file], en_vocab, tmp_path, static_masking=True, dupe_factor=2, eval_fraction=0,
                   workers=1, progress=False)  # fmt: skip
    assert meta["masking"]["mode"] == "static" and len(meta["shards"]) == 1
    docs, doc = [], []
    for line in brown_file.read_text(encoding="utf-8").splitlines():  # Google's reading loop
        line = line.strip()
        if not line:
            docs.append(doc)
            doc = []
        elif tokens := en_tok.tokenize(line):
            doc.append(tokens)
    docs.append(doc)
    vocab_words = [t for t, _ in sorted(en_tok.vocab.items(), key=lambda kv: kv[1])]
    google = google_training_instances(docs, 128, 2, 0.1, 0.15, 20, vocab_words, random.Random(12345))
    name = meta["shards"][0]["name"]
    ours = SplitArrays(*(np.load(tmp_path / f"{name}.{k}.npy") for k in ("ids", "index", "labels")))
    compare_with_google(ours, google, en_tok)


# ---- Google's segment rules, on documents whose ids say where each token came from --------------------------

V = 1 << 20


def numbered_documents(n_docs: int, rng: random.Random) -> tuple[TokenizedDocuments, np.ndarray]:
    """Gives documents of random-length sentences whose ids are 1000 + the token's position in the
    corpus, and the document of each position."""
    docs, doc_of, next_id = [], [], 1000
    for d in range(n_docs):
        doc = []
        for _ in range(rng.randint(2, 40)):
            length = rng.choice([rng.randint(1, 30), rng.randint(1, 30), rng.randint(30, 200)])
            doc.append(list(range(next_id, next_id + length)))
            doc_of += [d] * length
            next_id += length
        docs.append(doc)
    return TokenizedDocuments.from_lists(docs), np.array(doc_of)


def synthetic_vocab() -> Vocab:
    return Vocab(size=V, cls_id=101, sep_id=102, mask_id=103, pad_id=0, continuation=np.zeros(V, dtype=bool))


def test_segments_follow_googles_rules():
    rng = random.Random(7)
    flat, doc_of = numbered_documents(200, rng)
    sentence_start = set(flat.sentence_starts.tolist())
    vocab = synthetic_vocab()
    settings = InstanceSettings(max_seq_length=64, short_seq_prob=0.1, max_predictions_per_seq=10)
    inst, order = create_instances(flat, settings, vocab, random.Random(1))
    out = assemble(flat, inst, order, vocab, static=False)
    cut = collections.Counter()
    for offset, n, len_a, random_next in out.index.tolist():
        ids = out.ids[offset : offset + n].astype(np.int64)
        assert n <= 64
        assert ids[0] == vocab.cls_id and ids[len_a - 1] == vocab.sep_id and ids[-1] == vocab.sep_id
        a, b = ids[1 : len_a - 1] - 1000, ids[len_a:-1] - 1000
        assert len(a) >= 1 and len(b) >= 1 and (a >= 0).all() and (b >= 0).all()  # no other special ids
        assert (np.diff(a) == 1).all() and (np.diff(b) == 1).all()  # each segment a contiguous run
        assert len(set(doc_of[a])) == 1 and len(set(doc_of[b])) == 1
        if random_next:
            assert doc_of[b[0]] != doc_of[a[0]]  # from another document
        else:
            assert doc_of[b[0]] == doc_of[a[0]] and b[0] > a[-1]  # what follows A in its document
        cut["a front"] += int(a[0]) not in sentence_start
        cut["b front"] += int(b[0]) not in sentence_start
        cut["a back"] += int(a[-1] + 1) not in sentence_start
        cut["b back"] += int(b[-1] + 1) not in sentence_start
    # truncate_seq_pair removes from the front as well as the back, of either segment
    assert min(cut.values()) > 50, cut


def test_target_length_and_short_sequences():
    """Google draws one target length per document: max_seq_length - 3, or with probability
    short_seq_prob a random one in [2, max_seq_length - 3]; a chunk grows to it. With one-token
    sentences an IsNext pair (not cut short by the document's end) is exactly the target long."""
    docs = [[[1000 + 200 * d + s] for s in range(200)] for d in range(400)]
    flat = TokenizedDocuments.from_lists(docs)
    vocab = synthetic_vocab()

    def targets(short_seq_prob: float) -> dict[int, set[int]]:
        settings = InstanceSettings(max_seq_length=64, short_seq_prob=short_seq_prob, max_predictions_per_seq=10)
        inst, order = create_instances(flat, settings, vocab, random.Random(5))
        out = assemble(flat, inst, order, vocab, static=False)
        per_doc = collections.defaultdict(set)
        for offset, n, _, random_next in out.index.tolist():
            last = int(out.ids[offset + n - 2]) - 1000
            if not random_next and last % 200 != 199:
                per_doc[last // 200].add(n - 3)
        return per_doc

    never, sometimes, always = targets(0.0), targets(0.1), targets(1.0)
    assert set().union(*never.values()) == {61}
    assert all(len(lengths) == 1 for lengths in always.values())  # one target per document
    drawn = [min(lengths) for lengths in always.values()]
    assert min(drawn) <= 5 and max(drawn) >= 58 and abs(np.mean(drawn) - 31.5) < 3  # uniform on [2, 61]
    short = np.mean([min(lengths) < 61 for lengths in sometimes.values()])
    assert 0.06 < short < 0.14


def test_is_next_is_a_fair_coin():
    """IsNext 50% +- 1% where Google's rule tosses a coin (chunks of two or more sentences: short
    sentences, long documents, no short targets). Google's rule makes a one-sentence chunk always
    random, so on real text with short_seq_prob=0.1 somewhat over half are random (Brown: 54%)."""
    rng = random.Random(11)
    docs = [[list(range(1000, 1000 + rng.randint(3, 9))) for _ in range(300)] for _ in range(100)]
    flat = TokenizedDocuments.from_lists(docs)
    settings = InstanceSettings(max_seq_length=32, short_seq_prob=0.0, dupe_factor=4)
    inst, _ = create_instances(flat, settings, synthetic_vocab(), random.Random(12345))
    assert len(inst) > 24_000
    assert abs(np.mean(inst.random_next) - 0.5) < 0.01


# ---- masking statistics -----------------------------------------------------------------------------------


def masking_counts(data: PretrainingData, n: int, epoch: int = 0) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    specials = {data.cls_id, data.sep_id, data.pad_id, data.mask_id}
    for i in range(n):
        e = data.example(i, epoch, 12345)
        original, len_a, _ = instance(data, i)
        labels, ids = e["mlm_labels"], e["input_ids"]
        at = labels != -100
        counts["tokens"] += len(ids)
        counts["masked"] += int(at.sum())
        assert (labels[at] == original[at]).all()
        assert not (at[0] or at[len_a - 1] or at[-1]), "a special token was masked"
        assert not set(labels[at].tolist()) & specials
        assert (ids[~at] == original[~at]).all()
        counts["[MASK]"] += int((ids[at] == data.mask_id).sum())
        counts["kept"] += int((ids[at] == original[at]).sum())
        counts["random"] += int(((ids[at] != original[at]) & (ids[at] != data.mask_id)).sum())
        assert (e["token_type_ids"] == (np.arange(len(ids)) >= len_a)).all()
    return counts


def test_dynamic_masking_statistics(brown_data):
    assert len(brown_data) > 1000
    c = masking_counts(brown_data, len(brown_data))
    assert c["tokens"] > 100_000
    assert abs(c["masked"] / c["tokens"] - 0.15) < 0.005
    assert abs(c["[MASK]"] / c["masked"] - 0.8) < 0.01
    assert abs(c["kept"] / c["masked"] - 0.1) < 0.01
    assert abs(c["random"] / c["masked"] - 0.1) < 0.01


def test_static_masking_statistics(brown_file, en_vocab, tmp_path):
    prepare([brown_file], en_vocab, tmp_path, static_masking=True, dupe_factor=1, workers=1, progress=False)
    data = PretrainingData(tmp_path)
    masked = tokens = 0
    for i in range(len(data)):
        e = data.example(i, 0, 0)
        at = e["mlm_labels"] != -100
        masked, tokens = masked + int(at.sum()), tokens + len(at)
        assert not (at[0] or at[-1])
    assert tokens > 100_000 and abs(masked / tokens - 0.15) < 0.005
    assert (data.example(3, 0, 0)["input_ids"] == data.example(3, 5, 99)["input_ids"]).all()  # stored masks


def test_dynamic_masks_depend_on_seed_epoch_index(brown_data):
    same = [np.array_equal(brown_data.example(i, 2, 7)["mlm_labels"], brown_data.example(i, 2, 7)["mlm_labels"])
            for i in range(50)]  # fmt: skip
    assert all(same)
    a, b = brown_data.example(9, 2, 7), brown_data.example(9, 2, 7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other_epoch = [np.array_equal(brown_data.example(i, 2, 7)["mlm_labels"], brown_data.example(i, 3, 7)["mlm_labels"])
                   for i in range(50)]  # fmt: skip
    other_seed = [np.array_equal(brown_data.example(i, 2, 7)["mlm_labels"], brown_data.example(i, 2, 8)["mlm_labels"])
                  for i in range(50)]  # fmt: skip
    assert not any(other_epoch) and not any(other_seed)
    # a reopened folder (a resumed run) draws the same masks
    again = PretrainingData(brown_data.data_dir)
    assert np.array_equal(again.example(17, 4, 1)["input_ids"], brown_data.example(17, 4, 1)["input_ids"])


# ---- whole-word masking ------------------------------------------------------------------------------------


def word_groups(starts: np.ndarray, len_a: int) -> list[np.ndarray]:
    """Gives the positions of each word of an instance (specials excluded)."""
    starts = starts.astype(bool).copy()
    n = len(starts)
    starts[[0, 1, len_a - 1, len_a, n - 1]] = True
    bounds = np.append(np.flatnonzero(starts), n)
    groups = [np.arange(lo, hi) for lo, hi in itertools.pairwise(bounds)]
    return [g for g in groups if g[0] not in (0, len_a - 1, n - 1)]


def check_whole_words(data: PretrainingData, starts_of, n: int) -> int:
    """Asserts each word is masked entirely or not at all; gives how many words of 2+ tokens were masked."""
    multi = masked = tokens = 0
    for i in range(n):
        labels = data.example(i, 1, 5)["mlm_labels"]
        ids, len_a, _ = instance(data, i)
        for g in word_groups(starts_of(i, ids), len_a):
            hit = labels[g] != -100
            assert hit.all() or not hit.any(), f"instance {i}: word {g.tolist()} partly masked"
            multi += int(hit.all() and len(g) > 1)
        masked, tokens = masked + int((labels != -100).sum()), tokens + len(labels)
    assert abs(masked / tokens - 0.15) < 0.01
    return multi


@pytest.mark.parametrize("static", [False, True])
def test_whole_word_masking_english(brown_file, en_vocab, en_tok, tmp_path, static):
    prepare([brown_file], en_vocab, tmp_path, whole_word_masking=True, static_masking=static, dupe_factor=1,
            workers=1, progress=False)  # fmt: skip
    data = PretrainingData(tmp_path)
    cont = Vocab.of(en_tok).continuation
    if static:  # stored ids are masked: take word boundaries from the labels where masked
        def starts_of(i, ids):
            labels = data.example(i, 0, 0)["mlm_labels"]
            return ~cont[np.where(labels != -100, labels, ids)]
    else:
        def starts_of(i, ids):
            return ~cont[ids]
    assert check_whole_words(data, starts_of, min(len(data), 800)) > 100


def test_whole_word_masking_chinese_uses_jieba_words(shared_data, zh_vocab, tmp_path):
    text = (shared_data / "pretrain" / "zh" / "红楼梦.txt").read_text(encoding="utf-8")[:120_000]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "hlm.txt").write_text(text, encoding="utf-8")
    meta = prepare([tmp_path / "in"], zh_vocab, tmp_path / "wwm", whole_word_masking=True, workers=1, progress=False)
    assert meta["lang"] == "zh" and meta["masking"]["words"] == "jieba"
    data = PretrainingData(tmp_path / "wwm")
    shard = data._shard(0)

    def starts_of(i, ids):
        offset = int(shard["index"][i, 0])
        return np.asarray(shard["word_starts"][offset : offset + len(ids)])

    assert check_whole_words(data, starts_of, min(len(data), 300)) > 100
    # the tokens stay single characters: the same ids as without whole-word masking
    prepare([tmp_path / "in"], zh_vocab, tmp_path / "plain", workers=1, progress=False)
    assert np.array_equal(np.load(tmp_path / "plain" / "train-00000.ids.npy"), np.asarray(shard["ids"]))
    words = np.asarray(shard["word_starts"])
    assert 0.4 < words.mean() < 0.9  # jieba words of one to several characters


# ---- storage, collate, determinism ---------------------------------------------------------------------------


def test_storage_layout_and_meta(brown_file, en_vocab, tmp_path):
    meta = prepare([brown_file], en_vocab, tmp_path, shard_instances=500, workers=1, progress=False)
    names = sorted(p.name for p in tmp_path.iterdir())
    # exactly the shards meta.json lists, each an ids and an index array, beside the vocabulary: no temporary file left
    shards = [f"{s['name']}.{kind}.npy" for s in meta["shards"] for kind in ("ids", "index")]
    assert names == sorted(["meta.json", "tokenizer_config.json", "vocab.txt", *shards])
    assert json.loads((tmp_path / "meta.json").read_text()) == meta
    train = [s for s in meta["shards"] if s["split"] == "train"]
    assert len(train) > 1 and all(s["instances"] == 500 for s in train[:-1])
    for split in ("train", "eval"):  # the shards' instances add up to the counts and to what the reader serves
        assert sum(s["instances"] for s in meta["shards"] if s["split"] == split) == meta["counts"]["instances"][split]
        assert len(PretrainingData(tmp_path, split)) == meta["counts"]["instances"][split]
    ids = np.load(tmp_path / "train-00000.ids.npy", mmap_mode="r")
    index = np.load(tmp_path / "train-00000.index.npy")
    assert ids.dtype == np.uint16 and index.dtype == np.int64 and index.shape == (500, 4)
    assert (index[1:, 0] == np.cumsum(index[:-1, 1])).all() and index[-1, 0] + index[-1, 1] == len(ids)
    assert meta["vocab_size"] == 30522 and len(meta["vocab_sha256"]) == 64 and meta["do_lower_case"] is True
    assert meta["counts"]["documents"] == 60 and meta["counts"]["documents_eval"] >= 2
    assert meta["counts"]["instances"]["eval"] > 0
    assert meta["max_seq_length"] == 128 and meta["masking"]["max_predictions_per_seq"] == 20
    # a second prepare into the same folder replaces the first, leaving none of its shards
    prepare([brown_file], en_vocab, tmp_path, workers=1, progress=False)
    assert not (tmp_path / "train-00001.ids.npy").exists()


def test_output_does_not_depend_on_workers(shared_data, en_vocab, tmp_path):
    inputs = [shared_data / "pretrain" / "en" / "gutenberg" / name for name in ("austen-persuasion.txt", "blake-poems.txt")]
    for workers in (1, 2):
        prepare(inputs, en_vocab, tmp_path / str(workers), workers=workers, buffer_mb=0.2, progress=False)
    meta = json.loads((tmp_path / "1" / "meta.json").read_text())
    assert meta["counts"]["instances"]["train"] > 1000
    for shard in meta["shards"]:
        for kind in ("ids", "index"):
            name = f"{shard['name']}.{kind}.npy"
            assert np.array_equal(np.load(tmp_path / "1" / name), np.load(tmp_path / "2" / name)), name


def test_a_script_without_the_main_guard_can_use_workers(shared_data, en_vocab, tmp_path):
    """The workers do not import the calling script: one that calls prepare at its top level (no
    `if __name__ == "__main__":`) would otherwise call it again in every worker, for ever."""
    inputs = [shared_data / "pretrain" / "en" / "gutenberg" / "blake-poems.txt"]
    script = tmp_path / "unguarded.py"
    script.write_text("from bertkit.pretraining import prepare\n"
                      f"meta = prepare({[str(p) for p in inputs]!r}, {str(en_vocab)!r}, {str(tmp_path / 'out')!r}, "
                      "workers=2, buffer_mb=0.05, progress=False)\n"
                      "import sys\n"
                      "print('instances', meta['counts']['instances']['train'], sys.modules['__main__'].__file__)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("RuntimeError") == 0
    count, path = proc.stdout.split()[1:]
    assert int(count) > 0 and path == str(script)  # the script's own __file__ is back


def test_collate_pads_to_the_longest(brown_data):
    lengths = {i: len(brown_data.example(i, 0, 0)["input_ids"]) for i in range(len(brown_data))}
    short = min(lengths, key=lengths.get)
    batch = collate([brown_data.example(i, 0, 0) for i in (0, short)])
    width = max(lengths[0], lengths[short])
    assert batch["input_ids"].shape == (2, width) and batch["nsp_labels"].shape == (2,)
    assert all(v.dtype == torch.long for v in batch.values())
    n = lengths[short]
    assert batch["attention_mask"][1].sum() == n and (batch["input_ids"][1, n:] == 0).all()
    assert (batch["mlm_labels"][1, n:] == -100).all() and (batch["token_type_ids"][1, n:] == 0).all()


# ---- bad input --------------------------------------------------------------------------------------------------


def test_check_compatible(brown_data, en_vocab, zh_vocab):
    brown_data.check_compatible(en_vocab, 512)
    brown_data.check_compatible(Tokenizer.from_pretrained(en_vocab), 128)
    with pytest.raises(BertkitError, match="another vocabulary"):
        brown_data.check_compatible(zh_vocab, 512)
    with pytest.raises(BertkitError, match="max_seq_length 128 exceeds the model's max_position_embeddings 64"):
        brown_data.check_compatible(en_vocab, 64)


def test_missing_and_corrupt_folders(brown_file, en_vocab, tmp_path):
    with pytest.raises(BertkitError, match="no such folder"):
        PretrainingData(tmp_path / "nowhere")
    with pytest.raises(BertkitError, match="no meta.json"):
        PretrainingData(tmp_path)
    with pytest.raises(BertkitError, match="no such file or folder"):
        prepare([tmp_path / "missing.txt"], en_vocab, tmp_path / "out", progress=False)
    prepare([brown_file], en_vocab, tmp_path / "data", workers=1, progress=False)
    (tmp_path / "data" / "train-00000.index.npy").unlink()
    with pytest.raises(BertkitError, match=r"train-00000.index.npy: missing"):
        PretrainingData(tmp_path / "data")
    (tmp_path / "data" / "meta.json").write_text("{not json")
    with pytest.raises(BertkitError, match="meta.json: not valid JSON"):
        PretrainingData(tmp_path / "data")


def test_bad_documents_are_counted(brown_file, en_vocab, tmp_path):
    """One-sentence documents, empty and binary files, bad bytes and an over-long line: counted, reported."""
    (tmp_path / "in").mkdir()
    shutil.copy(brown_file, tmp_path / "in" / "a.txt")
    (tmp_path / "in" / "b_empty.txt").write_text("")
    (tmp_path / "in" / "c_binary.txt").write_bytes(b"\x00\x01\x02binary")
    single = "\n\n".join(f"Lonely sentence number {i}." for i in range(5))
    long_line = " ".join(["word"] * 3000)
    (tmp_path / "in" / "d.txt").write_bytes(
        (single + "\n\nFirst line.\n" + long_line + " .\n").encode() + b"bad \xff byte line\nLast line here.\n"
    )
    meta = prepare([tmp_path / "in"], en_vocab, tmp_path / "out", input_format="google", workers=1, progress=False)
    counts, read = meta["counts"], meta["read"]
    assert counts["skipped_documents_one_sentence"] == 5
    assert counts["sentences_longer_than_max_seq_length"] == 1  # the 3,000-word line (Brown's are all shorter)
    assert read["skipped"] == {"not valid UTF-8": 1}
    reasons = {Path(f["file"]).name: f["reason"] for f in read["skipped_files"]}
    assert reasons["b_empty.txt"].startswith("empty file") and reasons["c_binary.txt"].startswith("binary file")
    assert any("d.txt line 13: not valid UTF-8" in m for m in read["messages"])
    data = PretrainingData(tmp_path / "out")
    assert max(len(data.example(i, 0, 0)["input_ids"]) for i in range(len(data))) <= 128
    with pytest.raises(BertkitError, match="b_empty.txt: empty file"):
        prepare([tmp_path / "in"], en_vocab, tmp_path / "out2", on_error="stop", workers=1, progress=False)


def test_too_little_text_is_one_clear_error(en_vocab, tmp_path):
    (tmp_path / "one.txt").write_text("Just one sentence here.\n\nAnd one more document.\n")
    with pytest.raises(BertkitError, match="no training instances: NSP needs at least two documents"):
        prepare([tmp_path / "one.txt"], en_vocab, tmp_path / "out", workers=1, progress=False)


def test_json_lines_gzip_input(shared_data, en_vocab, en_tok, tmp_path):
    import gzip

    docs = brown_documents(shared_data, 25)
    with gzip.open(tmp_path / "docs.jsonl.gz", "wt", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"id": len(doc), "body": "\n".join(doc)}) + "\n")
    meta = prepare([tmp_path / "docs.jsonl.gz"], en_vocab, tmp_path / "out", text_field="body", workers=1, progress=False)
    assert meta["counts"]["documents"] == 25 and meta["read"]["skipped"] == {}
    # every line's text was read from the field, tokenized as the tokenizer alone does it
    assert meta["counts"]["tokens"] == sum(len(ids) for ids in en_tok.ids_for_pretraining([line for d in docs for line in d]))
    assert meta["counts"]["instances"]["train"] > 100


def test_truncated_shard_and_malformed_meta(brown_file, en_vocab, tmp_path):
    prepare([brown_file], en_vocab, tmp_path, workers=1, progress=False)
    ids = tmp_path / "train-00000.ids.npy"
    ids.write_bytes(ids.read_bytes()[:1000])
    with pytest.raises(BertkitError, match=r"train-00000.ids.npy: unreadable"):
        PretrainingData(tmp_path).example(0, 0, 0)
    meta = json.loads((tmp_path / "meta.json").read_text())
    del meta["masking"]["mode"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BertkitError, match=r"meta.json: malformed \(KeyError: 'mode'\)"):
        PretrainingData(tmp_path)
