"""`bertkit pretrain` end to end on a tiny config: export to transformers, exact resumption after
kill -9, Ctrl-C saving, and torchrun with two processes equal to one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers

import bertkit
from bertkit.cli import main
from bertkit.pretraining import prepare
from bertkit.runlog import read_log
from bertkit.tokenizer import Tokenizer

# Small enough to take seconds: 2 layers of 64, sequences of 64 tokens.
TINY = ["model.hidden_size=64", "model.num_attention_heads=2", "model.intermediate_size=128",
        "log.progress=false", "data.num_workers=0", "data.eval_batches=2"]
NO_DROPOUT = ["model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    root = tmp_path_factory.mktemp("pretrain")
    lines = (shared_data / "pretrain/en/brown.txt").read_text(encoding="utf-8").splitlines()[:6000]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = Tokenizer.train(lines, 2000)
    tok.save_pretrained(root / "vocab")
    out = root / "data"
    prepare([corpus], root / "vocab", out, max_seq_length=64, eval_fraction=0.05, progress=False, workers=1)
    return out


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertkit.cli", *args]


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_log(run / "log.jsonl") if "loss" in r}


def transformers_scores(hf: transformers.BertForPreTraining, examples: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Gives transformers' MLM and NSP loss and accuracy on pre-training instances, run one at a time (no padding),
    and the accuracy of always guessing the most frequent masked token."""
    mlm_loss = nsp_loss = 0.0
    mlm_hits = nsp_hits = 0
    targets: Counter = Counter()
    with torch.no_grad():
        for e in examples:
            out = hf(input_ids=torch.as_tensor(e["input_ids"])[None], token_type_ids=torch.as_tensor(e["token_type_ids"])[None])
            labels = torch.as_tensor(e["mlm_labels"])
            at = labels != -100
            logits = out.prediction_logits[0, at]  # (masked, V)
            mlm_loss += F.cross_entropy(logits, labels[at], reduction="sum").item()
            mlm_hits += int((logits.argmax(-1) == labels[at]).sum())
            targets.update(labels[at].tolist())
            nsp = torch.tensor([int(e["nsp_label"])])
            nsp_loss += F.cross_entropy(out.seq_relationship_logits, nsp).item()
            nsp_hits += int(out.seq_relationship_logits.argmax(-1) == nsp)
    masked, n = sum(targets.values()), len(examples)
    return {"mlm_loss": mlm_loss / masked, "mlm_acc": mlm_hits / masked, "nsp_loss": nsp_loss / n, "nsp_acc": nsp_hits / n,
            "loss": mlm_loss / masked + nsp_loss / n, "mlm_baseline_acc": max(targets.values()) / masked}


def test_pretrain_exports_a_model_transformers_loads(tmp_path: Path, data_dir: Path) -> None:
    run = tmp_path / "run"
    code = main(["pretrain", "--data", str(data_dir), "--out", str(run), "--steps", "12", "--batch-size", "8",
                 "--lr", "1e-3", *TINY, "log.every=2", "log.eval_every=6", "checkpoint.every=6"])
    assert code == 0
    model_dir = run / "model"
    assert {p.name for p in model_dir.iterdir()} >= {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"}
    rows = read_log(run / "log.jsonl")
    train_rows = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_mlm_acc" in r]
    assert [r["step"] for r in train_rows] == [2, 4, 6, 8, 10, 12] and [r["step"] for r in evals] == [6, 12]
    assert set(train_rows[0]) == {"step", "lr", "grad_norm", "loss", "mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc", "tokens_per_s"}
    for r in train_rows:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"])  # Google's loss: the sum of the two
        assert r["nsp_acc"] * 16 == round(r["nsp_acc"] * 16)  # right guesses out of the 2 x 8 sequences of the row
        # one warm-up step (1% of 12, rounded up), then linear decay to 0 at step 12: step s ran at 1e-3 (13 - s) / 11
        assert r["lr"] == pytest.approx(1e-3 * (13 - r["step"]) / 11)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000006.pt", "step-00000012.pt"]
    assert list((run / "tb").iterdir()), "TensorBoard events"

    ours = bertkit.BertForPreTraining.from_pretrained(model_dir).eval()
    hf = transformers.BertForPreTraining.from_pretrained(model_dir).eval()
    tok = Tokenizer.from_pretrained(model_dir)
    batch = tok(["the jury said it did find that", "no evidence"], ["many of the", "it was"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a, b = ours(**batch), hf(**batch)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, atol=1e-5, rtol=0)
    valid = batch["attention_mask"].bool()
    torch.testing.assert_close(a.prediction_logits[valid], b.prediction_logits[valid], atol=1e-5, rtol=0)

    # the last evaluation (step 12) is the exported model's, as transformers scores it on the same held-out instances:
    # the first eval_batches x batch size = 16, masks drawn with the run's seed, then with each segment's words
    # shuffled (the shuffles drawn in order from a generator of that seed)
    from bertkit.pretrain import shuffle_segments
    from bertkit.pretraining import PretrainingData

    seed = json.loads((run / "settings.json").read_text())["train"]["seed"]
    held_out = [PretrainingData(data_dir, "eval").example(i, 0, seed) for i in range(16)]
    rng = np.random.default_rng(seed)
    expected = transformers_scores(hf, held_out)
    expected["mlm_shuffled_acc"] = transformers_scores(hf, [shuffle_segments(e, rng) for e in held_out])["mlm_acc"]
    assert {k.removeprefix("eval_"): v for k, v in evals[-1].items() if k != "step"} == pytest.approx(expected, rel=1e-4)

    # the curves: a panel per metric group the log holds (loss, MLM and NSP accuracy, learning rate, throughput;
    # no dev metric in pre-training), two to a row, each showing its curves
    from pictures import check, run_layout

    assert main(["plot", str(run)]) == 0
    assert run_layout(run / "log.jsonl") == [2, 2, 1]
    check(run / "curves.png", [2, 2, 1])


@pytest.mark.slow
def test_kill_9_then_resume_continues_exactly(tmp_path: Path, data_dir: Path) -> None:
    # 40 steps, killed once 12 are logged: the margin keeps a fast machine from finishing between two polls
    args = ["pretrain", "--data", str(data_dir), "--steps", "40", "--batch-size", "8", "--lr", "1e-3",
            *TINY, "log.every=1", "log.eval_every=0", "checkpoint.every=5"]
    whole = tmp_path / "whole"
    subprocess.run(cli(*args, "--out", str(whole)), check=True, capture_output=True)

    cut = tmp_path / "cut"
    proc = subprocess.Popen(cli(*args, "--out", str(cut)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while max(losses(cut), default=0) < 12 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no chance to save anything
    proc.wait()
    assert max(losses(cut), default=0) < 40, "the run finished before it was killed"
    subprocess.run(cli(*args, "--out", str(cut), "--resume"), check=True, capture_output=True)

    assert losses(cut) == losses(whole)  # exact equality of every logged loss, steps 1..40
    assert sorted(losses(whole)) == list(range(1, 41))


def interrupt_after_three_steps(command: list[str], run: Path) -> str:
    """Starts a pre-training, sends Ctrl-C once its log has three steps; gives its stderr (exit code 130 checked)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while max(losses(run), default=0) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    return err


@pytest.mark.slow
def test_sigint_saves_a_checkpoint_and_resume_finishes(tmp_path: Path, data_dir: Path) -> None:
    run = tmp_path / "run"
    args = ["pretrain", "--data", str(data_dir), "--out", str(run), "--steps", "400", "--batch-size", "8",
            *TINY, "log.every=1", "log.eval_every=0", "checkpoint.every=0"]
    err = interrupt_after_three_steps(cli(*args), run)
    saved = sorted((run / "checkpoints").iterdir())
    assert len(saved) == 1 and "resume with --resume" in err
    step = int(saved[0].stem.split("-")[1])
    assert step == max(losses(run))
    proc = subprocess.run(cli(*args, "--resume", "train.steps=" + str(step + 2)), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert max(losses(run)) == step + 2


@pytest.mark.slow
def test_a_time_budget_stops_the_run_and_its_rate_reaches_zero_with_the_time(tmp_path: Path, data_dir: Path) -> None:
    run = tmp_path / "run"
    args = ["pretrain", "--data", str(data_dir), "--out", str(run), "--steps", "100000", "--batch-size", "8",
            "--lr", "1e-3", *TINY, "train.minutes=0.05", "optim.warmup=0.2", "log.every=1", "log.eval_every=0",
            "checkpoint.every=0"]
    assert main(args) == 0
    rows = [r for r in read_log(run / "log.jsonl") if "lr" in r]
    steps, lr = [r["step"] for r in rows], [r["lr"] for r in rows]
    assert 4 <= steps[-1] < 100000  # stopped by the clock
    top = lr.index(max(lr))
    assert 0 < top < len(lr) - 1 and max(lr) > 0.5e-3  # warmed up over the first fifth of the time, then decayed
    assert lr[-1] < 0.15 * max(lr) and all(a >= b for a, b in zip(lr[top:], lr[top + 1:], strict=False))
    elapsed = torch.load(next((run / "checkpoints").iterdir()), weights_only=False)["elapsed"]
    assert elapsed >= 3.0  # it stopped because the budget was spent (how soon after depends on the machine)

    # interrupted, a budget run resumes with the time it had left, its rate continuing the decay
    cut = tmp_path / "cut"
    interrupt_after_three_steps(cli(*args[:4], str(cut), *args[5:], "train.minutes=0.1"), cut)
    saved = torch.load(next((cut / "checkpoints").iterdir()), weights_only=False)
    assert 0 < saved["elapsed"] < 5.0
    assert main(["pretrain", "--out", str(cut), "--resume"]) == 0
    rows = [r for r in read_log(cut / "log.jsonl") if "lr" in r]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["lr"] < 0.15e-3
    final = torch.load(max((cut / "checkpoints").iterdir()), weights_only=False)["elapsed"]
    assert final >= 6.0


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over loopback")
@pytest.mark.slow
def test_torchrun_two_processes_equal_one(tmp_path: Path, data_dir: Path) -> None:
    args = ["pretrain", "--data", str(data_dir), "--steps", "4", "--batch-size", "8", "--lr", "1e-3",
            *TINY, *NO_DROPOUT, "log.every=1", "log.eval_every=0", "checkpoint.every=0", "train.device=cpu"]
    one = tmp_path / "one"
    subprocess.run(cli(*args, "--out", str(one)), check=True, capture_output=True)
    two = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    "-m", "bertkit.cli", *args, "--out", str(two)], check=True, capture_output=True, env=env)
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step
    # the same weights at the end, too
    wa = bertkit.BertForPreTraining.from_pretrained(one / "model").state_dict()
    wb = bertkit.BertForPreTraining.from_pretrained(two / "model").state_dict()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over loopback")
@pytest.mark.slow
def test_torchrun_processes_share_one_clock(tmp_path: Path, data_dir: Path) -> None:
    # a time budget under torchrun: every process takes rank 0's clock at log steps, so all stop at the same step
    # (a process that stopped alone would leave the others waiting in a collective until the timeout)
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    "-m", "bertkit.cli", "pretrain", "--data", str(data_dir), "--out", str(run), "--steps", "100000",
                    "--batch-size", "8", "--lr", "1e-3", *TINY, "train.minutes=0.05", "train.device=cpu",
                    "log.every=2", "log.eval_every=0", "checkpoint.every=0"], check=True, capture_output=True, env=env,
                   timeout=300)
    rows = [r for r in read_log(run / "log.jsonl") if "lr" in r]
    steps = [r["step"] for r in rows]
    assert steps == list(range(2, 2 * len(rows) + 1, 2)) and 4 <= steps[-1] < 100000  # stopped by the clock, at a log step
    assert rows[-1]["lr"] < 0.2 * max(r["lr"] for r in rows)
    assert torch.load(max((run / "checkpoints").iterdir()), weights_only=False)["elapsed"] >= 3.0


def test_local_init_starts_from_the_data_unigram_and_heads_on_neighbours(tmp_path: Path, data_dir: Path) -> None:
    from bertkit.pretraining import PretrainingData

    run = tmp_path / "run"
    # one step at a negligible rate: the exported model is the initialization
    assert main(["pretrain", "--data", str(data_dir), "--out", str(run), "--steps", "1", "--batch-size", "4",
                 "--lr", "1e-12", "model.init=local", *TINY]) == 0
    model = bertkit.BertForPreTraining.from_pretrained(run / "model")
    counts = np.bincount(np.concatenate([np.load(p) for p in sorted(data_dir.glob("*train*.ids.npy"))]),
                         minlength=model.config.vocab_size)
    assert counts.sum() > 10_000 and np.array_equal(counts, PretrainingData(data_dir).token_counts())
    expected = np.log((counts + 1) / (counts + 1).sum())
    assert np.allclose(model.mlm.bias.detach().numpy(), expected, atol=1e-5)
    # the position table is sinusoidal on the first head_dim / 2 pairs: each pair has a constant norm, except
    # at [CLS]'s position 0, left at zero so that its queries spread over the whole sequence
    pairs = model.bert.embeddings.position_embeddings.weight.detach()[:, :32].reshape(-1, 16, 2).norm(dim=-1)
    assert torch.allclose(pairs[1:], pairs[1].expand_as(pairs[1:]), rtol=1e-3) and pairs[1].min() > 0
    assert pairs[0].abs().max() == 0


def test_unknown_key_and_bad_values_are_one_line_errors(tmp_path: Path, data_dir: Path, capsys) -> None:
    base = ["pretrain", "--data", str(data_dir), "--out", str(tmp_path / "r")]
    for extra, expected in [
        (["optim.lrr=1"], "unknown key optim.lrr (did you mean optim.lr?)"),
        (["train.precision=fp8"], "train.precision must be one of fp32, bf16, fp16"),
        (["--steps", "0"], "train.steps must be positive"),
        (["--batch-size", "7", "train.accumulation=2"], "not divisible by accumulation"),
        (["model.init=xavier"], "model.init must be one of bert, local"),
    ]:
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and expected in err, err
    assert main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "r2")]) == 2
    assert "missing" in capsys.readouterr().err


def test_shuffle_segments_moves_words_with_their_labels_inside_each_segment() -> None:
    from bertkit.pretrain import shuffle_segments

    ids = np.array([2, 10, 11, 12, 13, 3, 20, 21, 22, 3])  # [CLS] a a a a [SEP] b b b [SEP]
    types = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    labels = np.full(10, -100)
    labels[[2, 7]] = [111, 121]  # the original tokens behind two masked positions
    example = {"input_ids": ids, "token_type_ids": types, "mlm_labels": labels, "nsp_label": np.int64(0)}
    rng = np.random.default_rng(0)
    outs = [shuffle_segments(example, rng) for _ in range(20)]
    for out in outs:
        assert out["input_ids"][[0, 5, 9]].tolist() == [2, 3, 3] and (out["token_type_ids"] == types).all()
        assert sorted(out["input_ids"][1:5].tolist()) == [10, 11, 12, 13] and sorted(out["input_ids"][6:9].tolist()) == [20, 21, 22]
        pairs = {(int(i), int(lab)) for i, lab in zip(out["input_ids"], out["mlm_labels"], strict=True) if lab != -100}
        assert pairs == {(11, 111), (21, 121)}
    assert (ids == [2, 10, 11, 12, 13, 3, 20, 21, 22, 3]).all(), "the example itself is left alone"
    assert any((out["input_ids"] != ids).any() for out in outs)


def test_gradient_checkpointing_and_accumulation_flags_keep_the_losses(tmp_path: Path, data_dir: Path) -> None:
    # --gradient-checkpointing recomputes each layer in the backward pass (dropout replayed) and --accumulation 2
    # runs the batch in two halves: the same losses as the plain run
    args = ["pretrain", "--data", str(data_dir), "--steps", "3", "--batch-size", "8", "--lr", "1e-3", *TINY, *NO_DROPOUT,
            "log.every=1", "log.eval_every=0", "checkpoint.every=0", "train.device=cpu"]
    assert main([*args, "--out", str(tmp_path / "plain")]) == 0
    assert main([*args, "--out", str(tmp_path / "lean"), "--gradient-checkpointing", "--accumulation", "2"]) == 0
    plain, lean = losses(tmp_path / "plain"), losses(tmp_path / "lean")
    assert sorted(plain) == [1, 2, 3] and [lean[s] for s in plain] == pytest.approx(list(plain.values()), rel=1e-5)
    assert json.loads((tmp_path / "lean" / "settings.json").read_text())["train"]["gradient_checkpointing"] is True
