"""The embed and rerank families: their files, their losses against sentence-transformers' on a real model, GradCache
through the training step, and fine-tuned folders that SentenceTransformer and CrossEncoder load with equal outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.tasks import get_task
from bertkit.tasks.groups import kind_of, read_groups

# ---- files --------------------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_is_pairs_groups_or_scored_pairs_by_its_header_or_shape(tmp_path: Path) -> None:
    pairs = read_groups(write(tmp_path / "p.tsv", "query\tpassage\nwho\tthem\nwhat\tthat\n"))
    assert kind_of(pairs) == "pairs" and pairs[1].texts == ("what", "that")
    groups = read_groups(write(tmp_path / "g.tsv", "anchor\tpositive\tnegative_1\tnegative_2\na\tb\tc\td\n"))
    assert kind_of(groups) == "groups" and groups[0].negatives == ("c", "d")
    scored = read_groups(write(tmp_path / "s.tsv", "a cat\ta dog\t3.5\nthe sea\tthe car\t0\n"))
    assert kind_of(scored) == "scored" and [e.score for e in scored] == [3.5, 0.0]
    triplets = read_groups(write(tmp_path / "t.tsv", "a cat\ta dog\ta car\n"))  # a third text, not a number
    assert kind_of(triplets) == "groups"
    lines = read_groups(write(tmp_path / "g.jsonl", json.dumps({"query": "q", "positive": "p", "negatives": ["n1", "n2"]})
                              + "\n"))
    assert lines[0].texts == ("q", "p", "n1", "n2")
    mapped = read_groups(write(tmp_path / "m.tsv", "x\ty\tz\n"), columns={"anchor": 2, "positive": 0})
    assert mapped[0].texts == ("z", "x")


@pytest.mark.parametrize(("text", "says"), [
    ("anchor\tpositive\tscore\na\tb\tentailment\n", "line 2: field 'score': 'entailment' is not a number"),
    ("anchor\tnegative\na\tb\n", "no positive column"),
    ("anchor\tpositive\tnegative\na\t \tc\n", "line 2: field 'positive': empty text"),
    ("query\tpositive\tnegative_1\tnegative_2\na\tb\tc\td\ne\tf\tg\n", "line 3: field 'negative_2': no column 3"),
])
def test_a_bad_file_names_the_line_and_field(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path / "bad.tsv", text)
    with pytest.raises(BertkitError, match=says.replace("(", r"\(")) as e:
        get_task("embed").read(path)
    assert str(path) in str(e.value)


def test_negatives_lists_of_different_lengths_are_an_error(tmp_path: Path) -> None:
    rows = [{"anchor": "a", "positive": "b", "negatives": ["c"]}, {"anchor": "d", "positive": "e", "negatives": ["f", "g"]}]
    path = write(tmp_path / "g.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BertkitError, match="line 2: field 'negatives': 2 negatives, but the first line has 1"):
        read_groups(path)


def test_a_reranker_label_outside_zero_to_one_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "s.tsv", "query\tpassage\tlabel\nq\tp\t1\nq\tr\t3\n")
    with pytest.raises(BertkitError, match="line 3: field 'score': 3 is not a relevance from 0 to 1"):
        get_task("rerank").read(path)


# ---- losses against sentence-transformers, on real weights --------------------------------------------

def _groups_batch(task, tok, groups):
    from bertkit.tasks import Dataset, ReadReport
    from bertkit.tasks.encoders import EmbedLearner
    from bertkit.tasks.groups import TextGroup

    data = Dataset([TextGroup(*g) for g in groups], ReadReport("<test>"))
    features = EmbedLearner(task).training_features(task.featurize(data, tok, None))
    return {k: torch.from_numpy(v) for k, v in features.collate(features.rows).items()}


@pytest.mark.parametrize("loss", ["mnrl", "symmetric", "cosent"])
def test_the_embed_objective_equals_sentence_transformers_loss(shared_data: Path, loss: str) -> None:
    from sentence_transformers import SentenceTransformer, losses

    from bertkit import Tokenizer
    from bertkit.tasks.encoders import EmbedObjective, sentence_encoder

    folder = shared_data / "models" / "all-MiniLM-L6-v2"
    texts = [("A man is eating food.", "A man eats something.", "A woman plays the violin."),
             ("A plane is taking off.", "An air plane is taking off.", "A man is playing a flute."),
             ("A cat sits on the mat.", "There is a cat on a mat.", "The stock market fell today.")]
    scores = [4.2, 5.0, 0.3]
    if loss == "cosent":
        task = get_task("embed", loss="cosent")
        groups = [(a, p, (), s) for (a, p, _), s in zip(texts, scores, strict=True)]
    else:
        task = get_task("embed", symmetric=loss == "symmetric")
        groups = [(a, p, (n,)) for a, p, n in texts]
    batch = _groups_batch(task, Tokenizer.from_pretrained(folder), groups)
    ours = EmbedObjective(task).loss(sentence_encoder(folder, "mean").eval()(**{
        k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).sentence_embedding, batch)

    st = SentenceTransformer(str(folder), device="cpu").eval()
    kind = {"mnrl": losses.MultipleNegativesRankingLoss, "symmetric": losses.MultipleNegativesSymmetricRankingLoss,
            "cosent": losses.CoSENTLoss}[loss]
    columns = list(zip(*texts, strict=True))[: 2 if loss != "mnrl" else 3]
    with torch.no_grad():
        theirs = kind(st)([st.tokenize(list(c)) for c in columns], torch.tensor(scores))
    assert float(ours) == pytest.approx(float(theirs), abs=1e-6)


def test_gradient_cache_in_the_training_step_gives_the_whole_batchs_gradients(make_tiny_model) -> None:
    """Without dropout, whose draws differ between one pass and several (test_embedding_losses replays them)."""
    from bertkit import Tokenizer
    from bertkit.tasks.encoders import EmbedObjective, sentence_encoder

    tiny_model = make_tiny_model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    tok = Tokenizer.from_pretrained(tiny_model)
    groups = [(f"query number {i} about {w}", f"a passage on {w} and more", (f"nothing of {i}",))
              for i, w in enumerate(["emma", "whales", "london", "thursday", "ships", "rain"])]
    grads = []
    for cache in (0, 4):
        task = get_task("embed", gradient_cache=cache, matryoshka=(32, 16))
        batch = _groups_batch(task, tok, groups)
        torch.manual_seed(1)
        model = sentence_encoder(tiny_model, "mean").train()
        objective = EmbedObjective(task)
        torch.manual_seed(2)
        if objective.backward is None:
            sums = objective(model, batch)
            (sums["loss"] / 6).backward()
        else:
            sums = objective.backward(model, batch, lambda s: s["loss"] / 6)
        grads.append((float(sums["loss"]), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss, whole), (cached_loss, cached) = grads
    assert cached_loss == pytest.approx(loss, abs=1e-5) and set(whole) == set(cached)
    for name, g in whole.items():
        assert torch.allclose(g, cached[name], atol=1e-5), name


# ---- fine-tuned folders ---------------------------------------------------------------------------------

def _pairs(builtin_data: Path, n: int = 48) -> list[tuple[str, str]]:
    lines = (builtin_data / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
    texts = [line.split("\t")[0] for line in lines]
    return [(" ".join(t.split()[: max(3, len(t.split()) // 2)]), t) for t in texts]


def test_a_fine_tuned_embedder_gives_sentence_transformers_vectors(tmp_path: Path, tiny_model: Path,
                                                                  builtin_data: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from bertkit.embed import Embedder

    pairs = _pairs(builtin_data)
    write(tmp_path / "train.tsv", "anchor\tpositive\n" + "".join(f"{a}\t{p}\n" for a, p in pairs[:40]))
    write(tmp_path / "dev.tsv", "anchor\tpositive\n" + "".join(f"{a}\t{p}\n" for a, p in pairs[40:]))
    main(["finetune", "--task", "embed", "--model", str(tiny_model), "--train", str(tmp_path / "train.tsv"),
          "--dev", str(tmp_path / "dev.tsv"), "--out", str(tmp_path / "run"), "--epochs", "1", "--batch-size", "8",
          "--lr", "1e-3", "--normalize", "--matryoshka", "32,16", "--gradient-cache", "5"])
    folder = tmp_path / "run" / "model"
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert {"ndcg@10", "mrr@10", "recall@1", "ndcg@10/16"} <= set(results["best"]["dev"])
    texts = [p for _, p in pairs[:6]]
    ours = Embedder(folder)(texts)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # --normalize: the folder says so
    assert np.abs(ours - theirs).max() < 1e-5

    from openai import OpenAI

    from bertkit.export import export
    from tests.test_serve import Server

    export(folder, tmp_path / "onnx")  # the export keeps the folder's pooling
    assert np.abs(Embedder(tmp_path / "onnx")(texts) - ours).max() < 1e-4
    srv = Server(folder)  # no --pooling: the folder says it
    try:
        got = OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="-", max_retries=0).embeddings.create(
            model="bertkit", input=texts, dimensions=16)
        short = ours[:, :16] / np.linalg.norm(ours[:, :16], axis=1, keepdims=True)  # Matryoshka: cut, renormalized
        np.testing.assert_allclose(np.array([d.embedding for d in got.data]), short, atol=1e-5)
    finally:
        assert srv.stop()[0] == 0


@pytest.mark.parametrize("loss", ["bce", "listwise"])
def test_a_fine_tuned_reranker_gives_cross_encoder_scores(tmp_path: Path, tiny_model: Path, builtin_data: Path,
                                                          loss: str) -> None:
    from sentence_transformers import CrossEncoder

    import bertkit

    pairs = _pairs(builtin_data)
    groups = [(a, p, pairs[(i + 7) % len(pairs)][1]) for i, (a, p) in enumerate(pairs)]
    write(tmp_path / "train.tsv", "query\tpositive\tnegative\n" + "".join("\t".join(g) + "\n" for g in groups[:40]))
    write(tmp_path / "dev.tsv", "query\tpositive\tnegative\n" + "".join("\t".join(g) + "\n" for g in groups[40:]))
    main(["finetune", "--task", "rerank", "--loss", loss, "--model", str(tiny_model), "--train",
          str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"), "--out", str(tmp_path / "run"),
          "--epochs", "1", "--batch-size", "8", "--lr", "1e-3"])
    folder = tmp_path / "run" / "model"
    assert {"ndcg@10", "mrr@10"} <= set(json.loads((tmp_path / "run" / "results.json").read_text())["best"]["dev"])
    asked = [(g[0], g[1]) for g in groups[:4]] + [(g[0], g[2]) for g in groups[:4]]
    ours = [p["score"] for p in bertkit.pipeline(folder)([q for q, _ in asked], [d for _, d in asked])]
    theirs = CrossEncoder(str(folder), device="cpu").predict(asked)
    assert np.abs(np.array(ours) - theirs).max() < 1e-5
    if loss == "listwise":
        return
    from tests.test_serve import Server

    srv = Server(folder)
    try:  # TEI's body: a query and texts; the answer is the texts' indices, most relevant first
        code, got = srv.request("POST", "/v1/rerank", json.dumps({"query": asked[0][0], "texts": [asked[0][1], asked[4][1]]}))
        assert code == 200
        expected = sorted(range(2), key=lambda i: -ours[0 if i == 0 else 4])
        assert [r["index"] for r in got] == expected
        assert got[0]["score"] == pytest.approx(max(ours[0], ours[4]), abs=1e-5)
    finally:
        assert srv.stop()[0] == 0


@pytest.mark.parametrize(("flags", "says"), [
    (["--task", "embed", "--loss", "cosent", "--matryoshka", "4096,32"],
     "--matryoshka 4096,32: 4096 is larger than the model's vectors"),
    (["--task", "embed"], "scored pairs; --loss mnrl trains on pairs or groups"),
    (["--task", "rerank", "--loss", "listwise"], "--loss listwise ranks each query's group: it needs groups"),
    (["--task", "embed", "--loss", "cosent", "--gradient-cache", "4"], "--gradient-cache is for --loss mnrl"),
    (["--task", "rerank", "--loss", "cosent"], "--loss cosent: the rerank task trains with bce or listwise"),
    (["--task", "classify", "--loss", "mnrl"], "--loss is for embed and rerank, not classify"),
])
def test_a_wrong_option_stops_before_anything_is_written(tmp_path: Path, tiny_model: Path, capsys, flags: list[str],
                                                         says: str) -> None:
    write(tmp_path / "pairs.tsv", "anchor\tpositive\tscore\na\tb\t1\nc\td\t0\n")
    code = main(["finetune", *flags, "--model", str(tiny_model), "--train", str(tmp_path / "pairs.tsv"),
                 "--dev", str(tmp_path / "pairs.tsv"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cosent_trains_on_scored_pairs_and_reports_the_correlations(tmp_path: Path, tiny_model: Path,
                                                                    builtin_data: Path) -> None:
    pairs = _pairs(builtin_data)
    rows = [(a, p, 1.0) for a, p in pairs[:24]] + [(a, pairs[(i + 5) % 48][1], 0.0) for i, (a, _) in enumerate(pairs[:24])]
    write(tmp_path / "scored.tsv", "text\tpair\tscore\n" + "".join(f"{a}\t{p}\t{s}\n" for a, p, s in rows))
    assert main(["finetune", "--task", "embed", "--loss", "cosent", "--model", str(tiny_model), "--train",
                 str(tmp_path / "scored.tsv"), "--dev", str(tmp_path / "scored.tsv"), "--out", str(tmp_path / "run"),
                 "--epochs", "1", "--batch-size", "16", "--lr", "1e-3"]) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["metric"] == "spearman" and {"pearson", "spearman"} == set(results["best"]["dev"])


def test_mine_writes_the_closest_passage_that_is_not_the_positive(tmp_path: Path, shared_data: Path) -> None:
    pairs = [("Who wrote Emma?", "Jane Austen wrote the novel Emma."),
             ("What do whales eat?", "Blue whales eat krill, tiny shrimp-like animals."),
             ("When does the train leave?", "The last train to Oxford leaves at ten.")]
    write(tmp_path / "pairs.tsv", "anchor\tpositive\n" + "".join(f"{a}\t{p}\n" for a, p in pairs))
    write(tmp_path / "corpus.txt", "Jane Austen also wrote Pride and Prejudice.\nShrimp live in the sea.\n"
                                   "Buses leave the station every hour.\nThe weather was fine.\n")
    assert main(["mine", "--model", str(shared_data / "models" / "all-MiniLM-L6-v2"), "--data", str(tmp_path / "pairs.tsv"),
                 "--corpus", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "groups.tsv"), "--negatives", "1",
                 "--range", "0:1"]) == 0
    groups = read_groups(tmp_path / "groups.tsv")
    assert kind_of(groups) == "groups"
    assert [g.negatives[0] for g in groups] == ["Jane Austen also wrote Pride and Prejudice.", "Shrimp live in the sea.",
                                               "Buses leave the station every hour."]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["embed", "rerank"])
def test_a_distilled_student_is_a_folder_of_its_family(tmp_path: Path, tiny_model: Path, builtin_data: Path,
                                                       task: str) -> None:
    """The student learns the teacher's vectors (embed) or logits and labels (rerank), and is saved as its family
    saves: an embedder's folder loads in SentenceTransformer with bertkit's vectors."""
    pairs = _pairs(builtin_data)
    groups = [(a, p, pairs[(i + 7) % len(pairs)][1]) for i, (a, p) in enumerate(pairs)]
    write(tmp_path / "groups.tsv", "query\tpositive\tnegative\n" + "".join("\t".join(g) + "\n" for g in groups))
    common = ["--model", str(tiny_model), "--train", str(tmp_path / "groups.tsv"), "--dev", str(tmp_path / "groups.tsv"),
              "--epochs", "1", "--batch-size", "16", "--lr", "1e-3"]
    assert main(["finetune", "--task", task, *common, "--out", str(tmp_path / "teacher")]) == 0
    assert main(["distill", "--teacher", str(tmp_path / "teacher" / "model"), "--student", "layers:0",
                 *common[2:], "--out", str(tmp_path / "student"), "--compare-alone"]) == 0
    results = json.loads((tmp_path / "student" / "results.json").read_text())
    assert {"student", "teacher_scores", "alone"} <= set(results) and "ndcg@10" in results["student"]["dev"]
    folder = tmp_path / "student" / "model"
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 1
    if task == "embed":
        from sentence_transformers import SentenceTransformer

        from bertkit.embed import Embedder

        texts = [p for _, p in pairs[:4]]
        theirs = SentenceTransformer(str(folder), device="cpu").encode(texts)
        assert np.abs(Embedder(folder)(texts) - theirs).max() < 1e-5


def test_an_embedders_student_keeps_the_teachers_width() -> None:
    from bertkit.students import soft_loss

    with pytest.raises(BertkitError, match="keeps its width"):
        soft_loss(torch.zeros(2, 16), torch.zeros(2, 32), 1.0, "vectors")
    assert float(soft_loss(torch.ones(2, 4), torch.zeros(2, 4), 1.0, "vectors")) == 1.0


@pytest.mark.slow
def test_two_processes_train_an_embedder_as_one_with_the_whole_batch(tmp_path: Path, make_tiny_model,
                                                                    builtin_data: Path) -> None:
    """torchrun, 2 processes (gloo): each process's texts are negatives for every anchor, gathered with their
    gradients, so the weights equal one process's with the whole batch."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    model = make_tiny_model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    pairs = _pairs(builtin_data)
    write(tmp_path / "train.tsv", "anchor\tpositive\n" + "".join(f"{a}\t{p}\n" for a, p in pairs[:40]))
    common = ["finetune", "--task", "embed", "--model", str(model), "--train", str(tmp_path / "train.tsv"), "--dev",
              str(tmp_path / "train.tsv"), "--epochs", "1", "--batch-size", "16", "--lr", "1e-3", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "bertkit", *common, "--out", str(tmp_path / "one")], check=True, env=env,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "bertkit", *common,
                    "--out", str(tmp_path / "two")], check=True, env=env, capture_output=True)
    one, two = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("one", "two"))
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < 1e-5


def test_each_column_is_encoded_as_its_own_batch_with_the_same_vectors(make_tiny_model) -> None:
    """Queries are not padded to their passages' length, and the vectors are those of one batch of every text; the
    embed family's batches are drawn at random (rows sharing a text must not gather in one batch)."""
    from bertkit import Tokenizer
    from bertkit.tasks.encoders import encode_columns, sentence_encoder

    folder = make_tiny_model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    task = get_task("embed")
    groups = [("who?", "a long passage about " + "whales and ships " * i, ("no",)) for i in range(1, 5)]
    batch = _groups_batch(task, Tokenizer.from_pretrained(folder), groups)
    model = sentence_encoder(folder, "mean").eval()
    whole = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).sentence_embedding
    assert torch.allclose(encode_columns(model, batch), whole, atol=1e-5)

    from bertkit.tasks import Dataset, ReadReport
    from bertkit.tasks.encoders import EmbedLearner
    from bertkit.tasks.groups import TextGroup

    data = Dataset([TextGroup(*g) for g in groups], ReadReport("<test>"))
    features = EmbedLearner(task).training_features(task.featurize(data, Tokenizer.from_pretrained(folder), None))
    assert not features.sort_keys.any() and features.lengths.min() > 0
