"""`bertkit distill`: the losses against hand-computed references, students built from the teacher's layers, the
teacher's outputs cached as it computes them, every family end to end (the distilled student agrees with its
teacher more often than the same student trained alone), transformers loading the student, resume equality, and
bad input as one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertkit
from bertkit import BertConfig, settings
from bertkit.cli import main
from bertkit.distillation import DistillObjective, DistillSettings, LossSettings, TeacherOutputs, distill
from bertkit.errors import BertkitError
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.predict import infer, pipeline
from bertkit.students import (
    attention_mse,
    build_student,
    hidden_mse,
    kl_at,
    layer_map,
    parse_student,
    projections,
    soft_loss,
)
from bertkit.tasks import get_task

EXT = {"classify": "tsv", "pair": "tsv", "qa": "json", "ner": "txt"}


# ---- the losses ------------------------------------------------------------------------------------------------

def test_kl_at_a_temperature_against_numpy() -> None:
    s, t, T = np.array([[1.0, 2.0, 0.5]]), np.array([[0.2, 3.0, -1.0]]), 2.0

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p, q = softmax(t / T), softmax(s / T)
    expected = (p * np.log(p / q)).sum() * T * T
    got = kl_at(torch.tensor(s), torch.tensor(t), T)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert kl_at(torch.tensor(t), torch.tensor(t), T).item() == pytest.approx(0.0, abs=1e-7)  # the same: 0
    # per token, averaged over the real ones only
    st, tt = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()
    per = kl_at(st, tt, T)
    assert soft_loss(st, tt, T, "classes", mask).item() == pytest.approx(per[mask].mean().item(), rel=1e-6)


def test_soft_losses_of_labels_and_scores() -> None:
    s, t, T = torch.tensor([[0.5, -1.0]]), torch.tensor([[2.0, 0.0]]), 3.0
    target = 1 / (1 + np.exp(-np.array([2.0, 0.0]) / T))
    x = np.array([0.5, -1.0]) / T
    bce = -(target * np.log(1 / (1 + np.exp(-x))) + (1 - target) * np.log(1 - 1 / (1 + np.exp(-x))))
    assert soft_loss(s, t, T, "labels").item() == pytest.approx(bce.mean() * T * T, rel=1e-6)
    assert soft_loss(torch.tensor([[1.0], [3.0]]), torch.tensor([[2.0], [3.0]]), T, "score").item() == pytest.approx(0.5)


def test_the_layer_map() -> None:
    assert layer_map(3, 6) == {0: 1, 1: 3, 2: 5}  # student layer i from teacher layer (i + 1) k - 1
    assert layer_map(2, 6) == {0: 2, 1: 5} and layer_map(4, 6) == {0: 1, 1: 2, 2: 4, 3: 5}
    assert layer_map(3, 6, "0:0,1:2,2:5") == {0: 0, 1: 2, 2: 5}
    for spec, message in (("0-1", "student:teacher pairs"), ("0:6", "out of range"), ("3:1", "out of range")):
        with pytest.raises(BertkitError, match=message):
            layer_map(3, 6, spec)


def test_attention_and_hidden_mse_against_hand_references() -> None:
    torch.manual_seed(0)
    s, t = torch.randn(2, 2, 3, 3), torch.randn(2, 2, 3, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    pairs = [(b, h, i, j) for b in range(2) for h in range(2) for i in range(3) for j in range(3)
             if mask[b, i] and mask[b, j]]
    expected = sum((s[p] - t[p]).item() ** 2 for p in pairs) / len(pairs)
    assert attention_mse(s, t, mask).item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(BertkitError, match="head by head"):
        attention_mse(s, torch.randn(2, 4, 3, 3), mask)
    proj = torch.nn.Linear(4, 6)
    hs, ht = torch.randn(5, 4), torch.randn(5, 6)
    assert hidden_mse(hs, ht, proj).item() == pytest.approx(((proj(hs) - ht) ** 2).mean().item(), rel=1e-6)


# ---- students --------------------------------------------------------------------------------------------------

def test_students_from_the_teachers_layers(task_models: dict[str, Path]) -> None:
    teacher = bertkit.BertForSequenceClassification.from_pretrained(task_models["classify"]).eval()
    same = build_student(teacher, "layers:0,1").eval()  # every layer kept: the teacher itself
    ids = torch.randint(5, 500, (2, 9))
    torch.testing.assert_close(same(ids).logits, teacher(ids).logits, atol=1e-6, rtol=0)
    one = build_student(teacher, "layers:1")
    assert one.config.num_hidden_layers == 1
    torch.testing.assert_close(one.bert.layers[0].ffn.up.weight, teacher.bert.layers[1].ffn.up.weight)
    torch.testing.assert_close(one.classifier.linear.weight, teacher.classifier.linear.weight)
    assert parse_student("mini", 2) == ("preset", "mini")
    for spec, message in (("layers:", "name the teacher's layers"), ("layers:0,0", "listed twice"),
                          ("layers:2", "out of range: the teacher has layers 0 to 1"), ("layers:a", "numbers"),
                          ("huge", "give layers:")):
        with pytest.raises(BertkitError, match=message):
            parse_student(spec, 2)


# ---- end to end ------------------------------------------------------------------------------------------------

def sample(src: Path, out: Path, n: int) -> Path:
    from bertkit.demo.run import sample_file

    return sample_file(src, out, n)


@pytest.fixture(scope="module")
def teachers(tmp_path_factory: pytest.TempPathFactory, builtin_data: Path) -> dict[str, dict[str, Path]]:
    """Tiny 4-layer teachers fine-tuned for a few epochs on the built-in data of each family (a CRF tagger too),
    with their train, dev and held-out files."""
    from bertkit import Tokenizer

    root = tmp_path_factory.mktemp("teachers")
    lines = (builtin_data / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    tok = Tokenizer.train([line.split("\t")[0] for line in lines], 2000)
    torch.manual_seed(0)
    base = root / "base"
    bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size, num_hidden_layers=4,
                                                 hidden_dropout_prob=0.0)).save_pretrained(base)
    tok.save_pretrained(base)
    found: dict[str, dict[str, Path]] = {}
    for name, family, n, extra in (("classify", "classify", 600, {}), ("qa", "qa", 160, {"task.max_seq_length": 96}),
                                   ("ner", "ner", 300, {}), ("ner-crf", "ner", 300, {"task.crf": True})):
        ext = EXT[family]
        folder = root / name
        files = {"train": sample(builtin_data / family / f"train.{ext}", folder / "train", n),
                 "dev": sample(builtin_data / family / f"dev.{ext}", folder / "dev", n // 3)}
        finetune(settings.load(FinetuneSettings, flags={
            "task.name": family, "model": base, "data.train": files["train"], "data.dev": files["dev"],
            "out": folder / "teacher", "train.epochs": 3, "optim.lr": 2e-3, "train.progress": False, **extra}))
        found[name] = {**files, "teacher": folder / "teacher" / "model"}
    return found


def run(files: dict[str, Path], out: Path, **flags: object) -> dict:
    return distill(settings.load(DistillSettings, flags={
        "teacher": files["teacher"], "student": "layers:1,3", "data.train": files["train"], "data.dev": files["dev"],
        "out": out, "train.epochs": 3, "optim.lr": 2e-3, "train.progress": False, **flags}))


def agreement(model: Path, teacher: Path, data: Path) -> float:
    """The share of held-out examples on which a model answers as the teacher does."""
    ours, theirs = pipeline(model), pipeline(teacher)
    task = ours.task
    features = task.featurize(task.read(data), ours.tokenizer, ours.label2id)
    a = task.decode(features, infer(ours.backend, task, features), **({"crf": ours.backend.crf} if ours.backend.crf else {}))
    b = task.decode(features, infer(theirs.backend, task, features), **({"crf": theirs.backend.crf} if theirs.backend.crf else {}))
    same = [json.dumps(task.prediction_json(x).get("label", task.prediction_json(x).get("tags", task.prediction_json(x).get("answer"))))
            == json.dumps(task.prediction_json(y).get("label", task.prediction_json(y).get("tags", task.prediction_json(y).get("answer"))))
            for x, y in zip(a, b, strict=True)]
    return sum(same) / len(same)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["classify", "qa", "ner", "ner-crf"])
def test_a_distilled_student_agrees_with_its_teacher_more_than_one_trained_alone(
        teachers: dict[str, dict[str, Path]], tmp_path: Path, name: str) -> None:
    files = teachers[name]
    summary = run(files, tmp_path / "student", compare_alone=True)
    assert {"student", "alone", "teacher_scores"} <= set(summary) and summary["recipe"]["student"] == "layers:1,3"
    distilled = agreement(tmp_path / "student" / "model", files["teacher"], files["dev"])
    alone = agreement(tmp_path / "student" / "alone" / "model", files["teacher"], files["dev"])
    assert distilled > alone, (distilled, alone)
    # an ordinary fine-tuned model folder: predict takes it; its card names the teacher and the recipe
    card = (tmp_path / "student" / "model" / "README.md").read_text()
    assert f"Distilled from the teacher `{files['teacher']}` into the student `layers:1,3`" in card
    assert pipeline(tmp_path / "student" / "model").task.name == pipeline(files["teacher"]).task.name


def narrow_model(teacher: Path, folder: Path) -> Path:
    """A pre-trained-like model half the teacher's width, with its vocabulary (a --student-init)."""
    tok = bertkit.Tokenizer.from_pretrained(teacher)
    cfg = BertConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=64, num_attention_heads=2, intermediate_size=256)
    bertkit.BertForPreTraining(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_transformers_loads_the_student_with_its_outputs(teachers: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    # a student half as wide, with the hidden-state loss: its projections are trained, then left out of the folder
    files = teachers["classify"]
    init = narrow_model(files["teacher"], tmp_path / "narrow")
    summary = run(files, tmp_path / "s", student="tiny", student_init=init, **{"loss.hidden": 1.0, "train.epochs": 1})
    assert summary["student"]["parameters"] < summary["teacher_scores"]["parameters"]
    folder = tmp_path / "s" / "model"
    assert not any("projection" in k for k in __import__("safetensors.torch").torch.load_file(folder / "model.safetensors"))
    ours = bertkit.BertForSequenceClassification.from_pretrained(folder).eval()
    theirs = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    ids = torch.randint(5, 1000, (3, 12))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_unlabeled_text_gets_soft_targets_only(teachers: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    files = teachers["classify"]
    text = tmp_path / "more.txt"
    text.write_text("".join(line.split("\t")[0] + "\n" for line in files["dev"].read_text().splitlines()[1:]))
    summary = run(files, tmp_path / "u", unlabeled=[text], **{"train.epochs": 1})
    assert summary["recipe"]["unlabeled_rows"] == len(files["dev"].read_text().splitlines()) - 1
    # a batch of unlabeled rows alone: its labels' loss is 0, its soft loss is not
    teacher = bertkit.BertForSequenceClassification.from_pretrained(files["teacher"]).eval()
    student = build_student(teacher, "layers:1").eval()  # no dropout: the same logits twice
    objective = DistillObjective(student, teacher, None, get_task("classify"), LossSettings(), None)
    batch = {"input_ids": torch.randint(5, 500, (3, 7)), "attention_mask": torch.ones(3, 7, dtype=torch.long),
             "token_type_ids": torch.zeros(3, 7, dtype=torch.long), "labels": torch.tensor([0, 1, 2]),
             "row": torch.arange(3), "labeled": torch.zeros(3, dtype=torch.long)}
    terms = objective(student, batch)
    assert terms["hard"].item() == 0 and terms["soft"].item() > 0
    batch["labeled"] = torch.tensor([1, 0, 1])
    sub = student(batch["input_ids"][[0, 2]])
    expected = torch.nn.functional.cross_entropy(sub.logits, torch.tensor([0, 2])).item()
    assert objective(student, batch)["hard"].item() / 3 == pytest.approx(expected, rel=1e-4)  # over labelled rows


@pytest.mark.slow
def test_the_teachers_outputs_are_cached_once(teachers: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    files = teachers["ner"]
    teacher = bertkit.BertForTokenClassification.from_pretrained(files["teacher"]).eval()
    task = get_task("ner")
    p = pipeline(files["teacher"])
    features = task.featurize(task.read(files["train"]), p.tokenizer, p.label2id)
    cache = TeacherOutputs(tmp_path / "t", teacher, task, features, 16, "fp32", key="k1")
    stamp = (tmp_path / "t" / "key.json").stat().st_mtime_ns
    again = TeacherOutputs(tmp_path / "t", teacher, task, features, 16, "fp32", key="k1")  # read back, not recomputed
    assert (tmp_path / "t" / "key.json").stat().st_mtime_ns == stamp
    rows = torch.tensor([3, 0, 7])
    batch = task.collate([features.rows[i] for i in rows.tolist()], features.pad_token_id)
    with torch.no_grad():
        live = teacher(**{k: torch.from_numpy(v) for k, v in batch.items() if k != "labels"}).logits
    got = again.rows(rows, live.shape[1], torch.device("cpu"))["logits"]
    mask = torch.from_numpy(batch["attention_mask"]).bool()
    torch.testing.assert_close(got[mask], live[mask], atol=1e-5, rtol=0)
    assert cache.arrays["logits"].shape[0] == len(features)


# ---- the command ----------------------------------------------------------------------------------------------

def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertkit", *args]


def losses(run_dir: Path) -> dict[int, float]:
    path = run_dir / "run" / "log.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def evaluations(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "run" / "log.jsonl").read_text().splitlines()]
    return [r for r in rows if any(k.startswith("eval_") for k in r)]


@pytest.mark.slow
def test_kill_9_then_resume_equals_an_uninterrupted_run(teachers: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    files = teachers["classify"]
    args = ["distill", "--teacher", str(files["teacher"]), "--student", "layers:1,3", "--train", str(files["train"]),
            "--dev", str(files["dev"]), "--epochs", "4", "--batch-size", "8", "--lr", "2e-3", "--eval-every", "10",
            "train.progress=false"]
    whole = tmp_path / "whole"
    subprocess.run(cli(*args, "--out", str(whole)), check=True, capture_output=True)
    cut = tmp_path / "cut"
    proc = subprocess.Popen(cli(*args, "--out", str(cut)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while max(losses(cut), default=0) < 100 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert max(losses(cut), default=0) < 300, "the run finished before it was killed"
    subprocess.run(cli(*args, "--out", str(cut), "--resume"), check=True, capture_output=True)
    # a log row averages the steps since the one before: the first after the resumed checkpoint averages fewer
    whole_losses, cut_losses = losses(whole), losses(cut)
    assert len(whole_losses) > 10 and set(cut_losses) == set(whole_losses)
    differing = [s for s in whole_losses if whole_losses[s] != cut_losses[s]]
    assert len(differing) <= 1, differing
    assert evaluations(cut) == evaluations(whole)  # every dev evaluation, to the last digit
    a = bertkit.BertForSequenceClassification.from_pretrained(whole / "model").state_dict()
    b = bertkit.BertForSequenceClassification.from_pretrained(cut / "model").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_bad_input_is_one_line(task_models: dict[str, Path], builtin_data: Path, tmp_path: Path, capsys) -> None:
    teacher = task_models["classify"]  # a 2-layer classifier of emma, moby, thursday
    books = builtin_data / "classify" / "train.tsv"  # six books: labels the teacher does not know
    known = tmp_path / "known.tsv"
    known.write_text("sentence\tlabel\nCall me Ishmael.\tmoby\nEmma was rich.\temma\n")
    base = ["distill", "--train", str(known), "--dev", str(known), "--out", str(tmp_path / "o")]
    cases = [
        (["--teacher", str(task_models["encoder"]), "--student", "layers:0"], "a teacher is a fine-tuned model"),
        (["--teacher", str(teacher), "--student", "layers:2"], "layer 2 is out of range: the teacher has layers 0 to 1"),
        (["--teacher", str(teacher), "--student", "layers:"], "name the teacher's layers to keep"),
        (["--teacher", str(teacher), "--student", "layers:1,1"], "a layer is listed twice"),
        (["--teacher", str(teacher), "--student", "layers:0", "--student-init", str(task_models["encoder"])],
         "use one or the other"),
        (["--teacher", str(teacher), "--student", "base"], "wider than the teacher"),
        (["--teacher", str(teacher), "--student", "layers:0", "--train", str(books)], "is not one of"),
        (["--teacher", str(teacher)], "no student: give --student SPEC"),
        (["--teacher", str(teacher), "--student", "layers:0", "--soft-weight", "0", "--hard-weight", "0"],
         "every loss weight is 0"),
    ]
    for extra, message in cases:
        code = main([*base, *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0 and message in err, (extra, err)
    assert not (tmp_path / "o" / "model").exists()


def test_class_weights_for_a_teacher_that_takes_none_is_one_line(task_models: dict[str, Path], tmp_path: Path,
                                                                  capsys) -> None:
    # files each teacher reads: the run gets as far as weighting the classes
    files = {"ner": ("train.txt", "Emma NNP B-PER\nwalked VBD O\n\nMoby NNP B-LOC\nsank VBD O\n"),
             "multilabel": ("train.jsonl", '{"text": "the bread", "labels": ["food"]}\n{"text": "a goal", "labels": ["sport"]}\n'),
             "regression": ("train.tsv", "sentence1\tsentence2\tscore\nA man runs.\tA man jogs.\t4.2\nA cat.\tA car.\t0.5\n")}
    for name, message in (("ner", "--class-weights is for classify and pair, not ner"),
                          ("multilabel", "--class-weights is for single-label classify and pair"),
                          ("regression", "--class-weights is for single-label classify and pair")):
        data = tmp_path / name / files[name][0]
        data.parent.mkdir()
        data.write_text(files[name][1])
        code = main(["distill", "--teacher", str(task_models[name]), "--student", "layers:0", "--train", str(data),
                     "--dev", str(data), "--out", str(tmp_path / name / "out"), "--class-weights", "auto"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0 and message in err, (name, err)


TEACHER_CACHE_SCRIPT = """
import sys
from pathlib import Path

import numpy as np

from bertkit import distillation
from bertkit.distributed import setup, teardown
from bertkit.predict import pipeline

ctx = setup("cpu")
teacher = pipeline(sys.argv[1])
texts = Path(sys.argv[2]).read_text().splitlines()
features = teacher.task.featurize(teacher.task.inputs_from_texts(texts), teacher.tokenizer, teacher.label2id)
if not ctx.is_main:
    def refuse(*args, **kwargs):
        raise RuntimeError("a process other than rank 0 ran the teacher")
    distillation.infer = refuse
folder = Path(sys.argv[3])
cache = distillation.TeacherOutputs(folder / "teacher", teacher.model, teacher.task, features, 8, "fp32", key="k",
                                    is_main=ctx.is_main)
np.save(folder / f"rank{ctx.rank}.npy", np.asarray(cache.arrays["logits"]))
teardown()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over loopback")
@pytest.mark.slow
def test_under_torchrun_rank_0_writes_the_teacher_cache_and_the_others_read_it(task_models: dict[str, Path],
                                                                             builtin_data: Path, tmp_path: Path) -> None:
    script = tmp_path / "cache.py"
    script.write_text(TEACHER_CACHE_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    texts = tmp_path / "texts.txt"
    lines = (builtin_data / "classify" / "dev.tsv").read_text().splitlines()[1:41]
    texts.write_text("".join(line.split("\t")[0] + "\n" for line in lines))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), str(task_models["ner"]), str(texts), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours, theirs = np.load(tmp_path / "rank0.npy"), np.load(tmp_path / "rank1.npy")
    assert ours.shape[0] > 10 and np.array_equal(ours, theirs)


def without_dropout(model: Path, folder: Path) -> Path:
    """A copy of a model folder whose config turns dropout off (a student copies it): processes then agree."""
    shutil.copytree(model, folder)
    config = json.loads((folder / "config.json").read_text())
    config |= {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout": 0.0}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over loopback")
@pytest.mark.slow
def test_torchrun_two_processes_distill_the_student_of_one(task_models: dict[str, Path], builtin_data: Path,
                                                           tmp_path: Path) -> None:
    teacher = without_dropout(task_models["classify"], tmp_path / "teacher")
    rows = [line.split("\t") for line in (builtin_data / "classify" / "train.tsv").read_text().splitlines()[1:]]
    names = {"emma": "emma", "moby_dick": "moby", "thursday": "thursday"}  # the labels the teacher knows
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join([f"{t}\t{names[b]}\n" for t, b in rows if b in names][:48]))
    args = ["distill", "--teacher", str(teacher), "--student", "layers:1", "--train", str(train), "--dev", str(train),
            "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--device", "cpu", "train.progress=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    subprocess.run(cli(*args, "--out", str(one)), check=True, capture_output=True, env=env)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    "-m", "bertkit.cli", *args, "--out", str(two)], check=True, capture_output=True, env=env, timeout=300)
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) and len(a) == 6
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step
    wa = bertkit.BertForSequenceClassification.from_pretrained(one / "model").state_dict()
    wb = bertkit.BertForSequenceClassification.from_pretrained(two / "model").state_dict()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4, msg=k)


def test_uniform_map_over_uneven_layers() -> None:
    assert layer_map(5, 12) == {0: 1, 1: 4, 2: 6, 3: 9, 4: 11}  # (i + 1) x 2.4, rounded half up, less one


def test_projections_only_where_widths_differ(task_models: dict[str, Path], tmp_path: Path) -> None:
    teacher = bertkit.BertForSequenceClassification.from_pretrained(task_models["classify"])
    assert projections(build_student(teacher, "layers:0"), teacher, {0: 1}) is None
    narrow = build_student(teacher, "tiny", narrow_model(task_models["classify"], tmp_path / "narrow"))
    found = projections(narrow, teacher, {0: 1})
    assert narrow.config.hidden_size == 64 and found is not None and found["0"].weight.shape == (128, 64)
