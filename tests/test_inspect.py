"""Looking inside BERT: fill-mask and embeddings against transformers' pipelines, attention maps against its
output_attentions, and `bertkit mask` drawing exactly what pre-training draws; each command's bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from pictures import check_attention

import bertkit
from bertkit import BertConfig, Tokenizer
from bertkit.cli import main
from bertkit.demo.run import data_dir
from bertkit.embed import Embedder
from bertkit.fillmask import FillMask
from bertkit.pretraining import PretrainingData, prepare

MINILM = "models/all-MiniLM-L6-v2"
MASKED = ["the whale rose beside the [MASK] .", "she [MASK] to the [MASK] and opened it .", "[MASK]"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory, task_models: dict[str, Path]) -> Path:
    """A tiny pre-trained-like model whose MLM output bias makes its guesses decisive (no near-ties)."""
    folder = tmp_path_factory.mktemp("mlm") / "model"
    tok = Tokenizer.from_pretrained(task_models["encoder"])
    torch.manual_seed(0)
    model = bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size))
    with torch.no_grad():
        model.mlm.bias.normal_(0, 3.0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_fill_mask_equals_transformers_pipeline(pretrained: Path, capsys) -> None:
    transformers.logging.set_verbosity_error()
    theirs = transformers.pipeline("fill-mask", model=str(pretrained), device="cpu")
    ours = bertkit.pipeline(pretrained, task="fill-mask")
    assert isinstance(ours, FillMask)
    got = ours(MASKED)
    assert [len(g) for g in got] == [5, 2, 5]  # one mask: its top 5; two masks: a list for each
    for text, mine in zip(MASKED, got, strict=True):
        expected = theirs(text, top_k=5)
        per_mask = [mine] if isinstance(mine[0], dict) else mine
        per_mask_hf = [expected] if isinstance(expected[0], dict) else expected
        for a, b in zip(per_mask, per_mask_hf, strict=True):
            assert [e["token"] for e in a] == [e["token"] for e in b]
            assert [e["token_str"] for e in a] == [e["token_str"] for e in b]
            np.testing.assert_allclose([e["score"] for e in a], [e["score"] for e in b], atol=1e-4, rtol=0)
    assert got[0][0]["sequence"] == MASKED[0].replace("[MASK]", got[0][0]["token_str"]).replace(" .", ".")
    assert main(["fill-mask", "--model", str(pretrained), "--top-k", "3", *MASKED[:2]]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == ours(MASKED[:2], top_k=3)


@pytest.mark.parametrize("pooling", ["mean", "cls", "pooler"])
def test_embeddings_equal_transformers(shared_data: Path, pooling: str) -> None:
    texts = ["A man is playing a guitar on the street at night, loudly and badly.", "The cat sleeps.", "x",
             "Someone plays an instrument."]  # mixed lengths: sorted inside, given back in this order
    model_dir = shared_data / MINILM
    ours = Embedder(model_dir, pooling=pooling, batch_size=2)(texts)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    hf = transformers.BertModel.from_pretrained(model_dir).eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf(**batch)
    mask = batch["attention_mask"][..., None].float()
    theirs = {"mean": (out.last_hidden_state * mask).sum(1) / mask.sum(1), "cls": out.last_hidden_state[:, 0],
              "pooler": out.pooler_output}[pooling].numpy()
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert ours.shape == (4, 384) and cosine.min() >= 0.9999, cosine
    unit = Embedder(model_dir, pooling=pooling, normalize=True)(texts)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(unit, ours / np.linalg.norm(ours, axis=1, keepdims=True), atol=1e-5)


def test_embed_cli_writes_json_lines_or_npy_and_an_exported_encoder_agrees(task_models: dict[str, Path], tmp_path: Path,
                                                                           capsys) -> None:
    texts = ["Call me Ishmael.", "The whale rose beside the boat, and every harpooneer stood ready."]
    assert main(["embed", "--model", str(task_models["encoder"]), *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == texts and len(rows[0]["embedding"]) == 128
    out = tmp_path / "vectors.npy"
    assert main(["embed", "--model", str(task_models["encoder"]), "--out", str(out), *texts]) == 0
    saved = np.load(out)
    np.testing.assert_allclose(saved, np.array([r["embedding"] for r in rows]), atol=1e-6)
    assert main(["export", "--model", str(task_models["encoder"]), "--out", str(tmp_path / "exported")]) == 0
    np.testing.assert_allclose(Embedder(tmp_path / "exported")(texts), saved, atol=1e-4)


@pytest.mark.slow
def test_attention_maps_equal_transformers_output_attentions(shared_data: Path, tmp_path: Path, capsys) -> None:
    model_dir = shared_data / MINILM
    tok = Tokenizer.from_pretrained(model_dir)
    batch = tok(["my dog is cute", "a much longer sentence with nothing in it"], ["he likes playing", "ok"],
                padding=True, return_tensors="pt")
    ours = bertkit.BertModel.from_pretrained(model_dir).eval().attention_maps(batch["input_ids"], batch["attention_mask"],
                                                                              batch["token_type_ids"])
    hf = transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = torch.stack(hf(**batch, output_attentions=True).attentions)
    assert ours.shape == theirs.shape == (6, 2, 12, batch["input_ids"].shape[1], batch["input_ids"].shape[1])
    for row in range(2):
        real = batch["attention_mask"][row].bool()
        a, b = ours[:, row][..., real, :][..., real], theirs[:, row][..., real, :][..., real]
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)), atol=1e-5, rtol=0)  # real keys get it all
    # the picture: the input representation above one head drawn large, or above every head (a row of 12 per layer)
    for args, layers, heads in ((["--layer", "3", "--head", "7"], 1, 1), ([], 6, 12)):
        out = tmp_path / f"att{len(args)}.png"
        assert main(["attention", "--model", str(model_dir), "my dog is cute", "--pair", "he likes playing", "--out",
                     str(out), *args]) == 0
        check_attention(out, layers, heads)
    capsys.readouterr()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("masking")
    text = gzip.decompress((data_dir("en") / "pretrain" / "gutenberg.txt.gz").read_bytes()).decode("utf-8")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(text.split("\n\n")[:300]) + "\n", encoding="utf-8")
    Tokenizer.train(corpus.read_text(encoding="utf-8").splitlines(), 3000).save_pretrained(root / "vocab")
    for name, wwm in (("data", False), ("data-wwm", True)):
        prepare([corpus], root / "vocab", root / name, max_seq_length=64, eval_fraction=0, seed=1, workers=1,
                progress=False, whole_word_masking=wwm)
    return root / "data", root / "data-wwm"


@pytest.mark.parametrize("whole_word", [False, True])
def test_mask_draws_what_training_draws_for_the_same_instance(prepared: tuple[Path, Path], whole_word: bool,
                                                              capsys) -> None:
    data = PretrainingData(prepared[whole_word])
    tok = Tokenizer.from_pretrained(data.data_dir)
    checked = 0
    for index in range(len(data)):
        stored = data.example(index, epoch=0, seed=0)  # just for its segments; the masks are drawn below
        original = np.where(stored["mlm_labels"] != -100, stored["mlm_labels"], stored["input_ids"])
        len_a = int((stored["token_type_ids"] == 0).sum())
        a, b = tok.decode(original[1 : len_a - 1].tolist()), tok.decode(original[len_a:-1].tolist())
        if tok.ids_for_pretraining([a])[0] != original[1 : len_a - 1].tolist() or \
           tok.ids_for_pretraining([b])[0] != original[len_a:-1].tolist():
            continue  # a text that does not tokenize back to the same pieces ([UNK] and the like)
        for seed, epoch in ((7, 0), (7, 3), (11, 1)):
            args = ["mask", "--vocab", str(data.data_dir), a, "--pair", b, "--seed", str(seed), "--epoch", str(epoch),
                    "--index", str(index), "--json", *(["--whole-word-masking"] if whole_word else [])]
            assert main(args) == 0
            shown = json.loads(capsys.readouterr().out)
            expected = data.example(index, epoch, seed)
            assert shown["input_ids"] == expected["input_ids"].tolist()
            assert shown["mlm_labels"] == expected["mlm_labels"].tolist()
            assert shown["token_type_ids"] == expected["token_type_ids"].tolist()
            chosen = [r for r in shown["rows"] if r["chosen"]]
            assert len(chosen) == shown["counts"]["chosen"] == int((expected["mlm_labels"] != -100).sum())
        checked += 1
        if checked == 5:
            break
    assert checked == 5


def test_mask_prints_a_table_a_learner_can_read(prepared: tuple[Path, Path], capsys) -> None:
    assert main(["mask", "--vocab", str(prepared[0]), "The man went to the store. He bought a gallon of milk."]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: the man went to the store.\nB: he bought a gallon of milk.\nnext-sentence label: IsNext")
    assert "[CLS]" in out and "chosen to predict" in out and "became [MASK]" in out


BAD = [  # (args, in the one-line answer)
    (["fill-mask", "--model", "{pretrained}", "no mask here"], "input 1 has no [MASK] to fill"),
    (["fill-mask", "--model", "{classify}", "a [MASK] here"], "has no masked-LM head"),
    (["fill-mask", "--model", "{pretrained}", "--top-k", "0", "a [MASK]"], "--top-k must be positive"),
    (["embed", "--model", "{qa}", "--pooling", "pooler", "text"], "has no trained pooler"),
    (["embed", "--model", "{pretrained}"], "no texts to embed"),
    (["attention", "--model", "{pretrained}", "text", "--out", "{out}", "--layer", "2", "--head", "0"],
     "--layer 2: the model has layers 0 to 1"),
    (["attention", "--model", "{pretrained}", "text", "--out", "{out}", "--layer", "0", "--head", "9"],
     "--head 9: the model has heads 0 to 1"),
    (["attention", "--model", "{pretrained}", "text", "--out", "{out}", "--layer", "0"], "give --layer and --head together"),
    (["mask", "--vocab", "{pretrained}", "only one sentence"], "one sentence: next-sentence prediction needs two segments"),
]


@pytest.mark.parametrize(("args", "expected"), BAD, ids=[" ".join(a[:1] + a[3:5]) for a, _ in BAD])
def test_bad_input_is_one_line(pretrained: Path, task_models: dict[str, Path], tmp_path: Path, args: list[str],
                               expected: str, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(""))
    values = {"pretrained": str(pretrained), "classify": str(task_models["classify"]), "qa": str(task_models["qa"]),
              "out": str(tmp_path / "x.png")}
    assert main([a.format(**values) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
