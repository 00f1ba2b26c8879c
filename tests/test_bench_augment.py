"""TinyBERT's augmentation (bench/augment.py, measured and left out of bertkit): the candidates are the masked LM's
own top tokens (against bertkit's fill-mask, itself checked against transformers' pipeline), filtered as documented;
copies replace words at rate p with those candidates and keep a sentence's length; the text lines it writes are
what `bertkit distill --unlabeled` reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import bertkit
from bench.augment import Augmenter, augment_dataset, lines
from bertkit import BertConfig
from bertkit.distillation import read_unlabeled
from bertkit.fillmask import FillMask
from bertkit.tasks import get_task

FAVOURITES = ["good", "bad", "the", "##s", "[UNK]", "film"]  # the head's bias makes these the top 6, in this order


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory, builtin_data: Path) -> Path:
    """A tiny random masked LM whose head prefers FAVOURITES, strongly and in order."""
    lines = (builtin_data / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    tok = bertkit.Tokenizer.train([line.split("\t")[0] for line in lines] + ["good bad film the cats"] * 50, 2000)
    assert all(tok.convert_tokens_to_ids(t) != tok.unk_token_id for t in FAVOURITES if t != "[UNK]")
    torch.manual_seed(0)
    model = bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size, num_hidden_layers=2))
    with torch.no_grad():
        for rank, token in enumerate(FAVOURITES):
            model.mlm.bias[tok.convert_tokens_to_ids(token)] = 8.0 - rank / 2  # not so far that a softmax underflows
    folder = tmp_path_factory.mktemp("mlm")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_candidates_are_the_masked_lms_top_tokens(mlm: Path) -> None:
    augmenter = Augmenter(mlm, top_k=3)
    words = augmenter.tok.words("The film was good, and the acting unforgettably bad.")
    candidates = augmenter.candidates([words])[0]
    fill = FillMask(mlm, top_k=40, device="cpu")
    for i, (word, found) in enumerate(zip(words, candidates, strict=True)):
        if len(augmenter.tok.tokenize(word)) > 1:
            assert found == [], word  # a word of several pieces is kept
            continue
        masked = " ".join(w if j != i else "[MASK]" for j, w in enumerate(words))
        ranked = [g["token_str"] for g in fill(masked)]
        expected = [t for t in ranked if not t.startswith("##") and t not in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
                    and t != word][:3]
        assert found == expected, (word, found, ranked[:8])
    assert candidates[words.index("film")] == ["good", "bad", "the"]
    assert candidates[words.index("good")] == ["bad", "the", "film"]  # never the word itself
    assert any(len(augmenter.tok.tokenize(w)) > 1 for w in words)  # the multi-piece case was checked


def test_copies_replace_words_at_rate_p_and_keep_the_length(mlm: Path) -> None:
    augmenter = Augmenter(mlm, top_k=4, p=0.4)
    sentences = [augmenter.tok.words("the film was good and the story was bad " * 6)]
    (copies,) = augmenter.augment(sentences, 20, seed=1)
    (options,) = augmenter.candidates(sentences)
    assert len(copies) == 20  # no two alike: a copy equal to another (or the sentence) would be dropped
    changed = 0
    for copy in copies:
        assert len(copy) == len(sentences[0])
        for word, new, allowed in zip(sentences[0], copy, options, strict=True):
            assert new == word or new in allowed
            changed += new != word
    assert 0.35 < changed / (20 * len(sentences[0])) < 0.45  # p = 0.4 over 1,080 words (sd 0.015)
    assert augmenter.augment(sentences, 20, seed=1) == [copies]  # seeded


def test_ner_copies_keep_one_word_for_one_word(mlm: Path, builtin_data: Path) -> None:
    task = get_task("ner")
    data = task.read(builtin_data / "ner" / "dev.txt")
    data.examples[:] = data.examples[:20]
    out = augment_dataset(task, data, Augmenter(mlm), 3, seed=0)
    assert 20 < len(out.examples) <= 60
    lengths = {len(e.words) for e in data.examples}
    assert all(len(e.words) in lengths and e.tags is None for e in out.examples)


def test_pair_copies_keep_the_second_text_and_read_back(mlm: Path, tmp_path: Path) -> None:
    task = get_task("pair")
    data = task.inputs_from_texts(["the film was good", "a bad story"], ["second one", "second two"])
    out = augment_dataset(task, data, Augmenter(mlm), 4, seed=0)
    assert {e.pair for e in out.examples} <= {"second one", "second two"} and len(out.examples) > 2
    assert all(e.text != "the film was good" for e in out.examples if e.pair == "second one")
    path = tmp_path / "augmented.txt"
    path.write_text("".join(line + "\n" for line in lines(task, out)))
    (back,) = read_unlabeled(task, (path,), {})
    assert [task.texts_of(e) for e in back.examples] == [task.texts_of(e) for e in out.examples]


def test_a_model_without_a_masked_lm_head_is_refused(mlm: Path, tmp_path: Path) -> None:
    encoder = bertkit.BertModel.from_pretrained(mlm)
    encoder.save_pretrained(tmp_path)
    bertkit.Tokenizer.from_pretrained(mlm).save_pretrained(tmp_path)
    with pytest.raises(bertkit.BertkitError, match="no masked-LM head"):
        Augmenter(tmp_path)
