"""Distillation on this machine: MiniLM-L6 teachers fine-tuned by bertkit, 3- and 2-layer students distilled from
them beside the same layers fine-tuned alone, every model scored on held-out test data by `bertkit evaluate`, and
each size's int8 speed (batch-1 forward, `bertkit serve` at 32 clients).

    python -m bench.distill [--tasks sst2 mrpc conll squad] [--recipes] [--work runs/distill-bench]
    # results: bench/results/distill.json (kept after every model: a rerun skips what is done)

Per task (train / dev for choosing the checkpoint / test, scored):
- sst2 (classify): 8,000 SST-2 training sentences / the next 1,000 / SST-2 dev (872), accuracy; the following
  24,000 training sentences, without labels, are the unlabeled text (`--unlabeled`).
- mrpc (pair): MRPC train less its last 500 pairs / those 500 / MRPC test (1,725), F1.
- conll (ner): CoNLL-2003 eng.train / eng.testa / eng.testb, entity F1.
- squad (qa): SQuAD v1.1 dev articles 0-14 (4,063 questions) / 30-33 (618) / 38-47 (1,988), F1; length 256
  (the training set is small so that a teacher fine-tunes in about half an hour on 2 cores).
Models: the teacher (MiniLM-L6, fine-tuned); `layers:0,2,4` of the teacher distilled, and MiniLM's layers 0, 2, 4
(pre-trained, not fine-tuned) fine-tuned alone with the same settings; the same for `layers:0,3` (2 layers).
`--recipes` first compares loss recipes on sst2 and conll (the 3-layer student): what docs/distill.md reports and
what the defaults are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import ROOT, SHARED_DATA, machine

MINILM = SHARED_DATA / "models" / "all-MiniLM-L6-v2"
RESULTS = ROOT / "bench" / "results" / "distill.json"
STUDENTS = {"3 layers": "layers:0,2,4", "2 layers": "layers:0,3"}
SETTINGS = {  # task: family, metric, teacher epochs, lr, extra flags
    "sst2": ("classify", "accuracy", 2, []), "mrpc": ("pair", "f1", 3, ["--metric", "f1"]),
    "conll": ("ner", "f1", 2, []), "squad": ("qa", "f1", 2, []),
}
FINETUNE_ONLY = {"squad": ["--max-seq-length", "256"]}  # distill takes the teacher's
TEACHER_LR, STUDENT_LR = "5e-5", "1e-4"
AUGMENT = 4  # TinyBERT made 20 copies of each input; 4 keep an sst2 run near the unlabeled one's size
RECIPES = {  # name: distill flags (the 3-layer student); every one explicit, whatever the defaults are
    "soft only, T=2": ["--hard-weight", "0", "--temperature", "2"],
    "soft + labels, T=1": ["--temperature", "1"],
    "soft + labels, T=2": ["--temperature", "2"],
    "soft + labels, T=4": ["--temperature", "4"],
    "+ hidden states, T=2": ["--hidden-weight", "1", "--temperature", "2"],
    "+ hidden states and attention, T=2": ["--hidden-weight", "1", "--attention-weight", "1", "--temperature", "2"],
}


def bertkit(*args: Any) -> str:
    proc = subprocess.run([sys.executable, "-m", "bertkit", *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"bertkit {' '.join(map(str, args))}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def data(work: Path) -> dict[str, dict[str, Path]]:
    """The train / dev / test files of each task (and sst2's unlabeled text), written once into `work`."""
    work.mkdir(parents=True, exist_ok=True)
    sst2 = (SHARED_DATA / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    mrpc = (SHARED_DATA / "mrpc" / "msr_paraphrase_train.txt").read_text(encoding="utf-8-sig").splitlines()
    squad = json.loads((SHARED_DATA / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
    files = {"sst2-train.tsv": "\n".join(sst2[:8001]), "sst2-dev.tsv": "\n".join([sst2[0], *sst2[8001:9001]]),
             "sst2-unlabeled.txt": "\n".join(line.rsplit("\t", 1)[0] for line in sst2[9001:33001]),
             "mrpc-train.tsv": "\n".join(mrpc[:-500]), "mrpc-dev.tsv": "\n".join([mrpc[0], *mrpc[-500:]])}
    for name, articles in (("train", squad["data"][:15]), ("dev", squad["data"][30:34]), ("test", squad["data"][38:])):
        files[f"squad-{name}.json"] = json.dumps({"version": "1.1", "data": articles})
    for name, text in files.items():
        if not (work / name).is_file():
            (work / name).write_text(text + "\n", encoding="utf-8")
    conll = SHARED_DATA / "conll2003"
    return {
        "sst2": {"train": work / "sst2-train.tsv", "dev": work / "sst2-dev.tsv", "test": SHARED_DATA / "sst2" / "dev.tsv",
                 "unlabeled": work / "sst2-unlabeled.txt"},
        "mrpc": {"train": work / "mrpc-train.tsv", "dev": work / "mrpc-dev.tsv",
                 "test": SHARED_DATA / "mrpc" / "msr_paraphrase_test.txt"},
        "conll": {"train": conll / "eng.train", "dev": conll / "eng.testa", "test": conll / "eng.testb"},
        "squad": {"train": work / "squad-train.json", "dev": work / "squad-dev.json", "test": work / "squad-test.json"},
    }


def pretrained_layers(work: Path, layers: list[int]) -> Path:
    """MiniLM's pre-trained embeddings and these layers: what a student fine-tuned alone starts from."""
    import bertkit
    from bertkit.students import build_student

    folder = work / f"minilm-layers-{'-'.join(map(str, layers))}"
    if not (folder / "config.json").is_file():
        full = bertkit.BertForPreTraining.from_pretrained(MINILM)
        build_student(full, "layers:" + ",".join(map(str, layers))).save_pretrained(folder)
        bertkit.Tokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


def evaluate(model: Path, test: Path) -> dict[str, float]:
    return json.loads(bertkit("evaluate", "--model", model, "--data", test).strip().splitlines()[-1])


def data_flags(task: str, files: dict[str, Path], finetune: bool = False) -> list[Any]:
    """The flags every run of `task` shares: its data, epochs and options (`finetune`: those distill takes from the
    teacher too)."""
    _, _, epochs, extra = SETTINGS[task]
    return ["--train", files["train"], "--dev", files["dev"], "--epochs", epochs, *extra,
            *(FINETUNE_ONLY.get(task, []) if finetune else []), "train.progress=false"]


def timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    return fn(), time.perf_counter() - t0


def run_task(task: str, files: dict[str, Path], work: Path, results: dict[str, Any], save: Any,
             recipe: list[str], sizes: list[str], augment_model: Path | None) -> None:
    family = SETTINGS[task][0]
    out = make_teacher(task, files, work, results, save)
    common = data_flags(task, files)
    teacher = work / task / "teacher"
    for size, spec in STUDENTS.items():
        if size.split()[0] not in sizes:
            continue
        layers = [int(i) for i in spec.removeprefix("layers:").split(",")]
        key = f"{size} distilled"
        folder = work / task / f"distilled-{len(layers)}"
        if key not in out or not (folder / "model").is_dir():  # the speed measurements need the folder
            _, seconds = timed(lambda folder=folder, spec=spec: bertkit(
                "distill", "--teacher", teacher / "model", "--student", spec, "--out", folder, "--lr", STUDENT_LR,
                *common, *recipe))
            out[key] = {"test": evaluate(folder / "model", files["test"]), "seconds": round(seconds)}
            save()
        key = f"{size} alone"
        if key not in out:
            folder = work / task / f"alone-{len(layers)}"
            _, seconds = timed(lambda folder=folder, layers=layers: bertkit(
                "finetune", "--task", family, "--model", pretrained_layers(work, layers), "--out", folder,
                "--lr", STUDENT_LR, *data_flags(task, files, finetune=True)))
            out[key] = {"test": evaluate(folder / "model", files["test"]), "seconds": round(seconds)}
            save()
        if task == "sst2" and size == "3 layers" and not any(k.startswith("3 layers distilled + unlabeled") for k in out):
            folder = work / task / "distilled-3-unlabeled"
            _, seconds = timed(lambda folder=folder, spec=spec: bertkit(
                "distill", "--teacher", teacher / "model", "--student", spec, "--out", folder, "--lr", STUDENT_LR,
                "--unlabeled", files["unlabeled"], *common, *recipe))
            out["3 layers distilled + unlabeled"] = {"test": evaluate(folder / "model", files["test"]), "seconds": round(seconds)}
            save()
        key = f"3 layers distilled + {AUGMENT} augmented copies"
        if task == "sst2" and size == "3 layers" and augment_model is not None and key not in out:
            folder = work / task / "distilled-3-augmented"
            augmented = work / f"{task}-augmented-{AUGMENT}.txt"
            from .augment import main as augment

            def run(folder: Path = folder, spec: str = spec, augmented: Path = augmented) -> None:
                augment(["--mlm", str(augment_model), "--teacher", str(teacher / "model"), "--data", str(files["train"]),
                         "--n", str(AUGMENT), "--seed", "42", "--out", str(augmented)])
                bertkit("distill", "--teacher", teacher / "model", "--student", spec, "--out", folder, "--lr", STUDENT_LR,
                        "--unlabeled", augmented, *common, *recipe)

            _, seconds = timed(run)
            out[key] = {"test": evaluate(folder / "model", files["test"]), "seconds": round(seconds),
                        "augment_model": str(augment_model)}
            save()


def make_teacher(task: str, files: dict[str, Path], work: Path, results: dict[str, Any], save: Any) -> dict[str, Any]:
    """Fine-tunes the task's teacher unless its folder is there (its score is recorded again: it is seeded); a
    teacher folder without a recorded score (finished by hand, e.g. `bertkit finetune ... --resume`) is scored."""
    family, metric, _, _ = SETTINGS[task]
    out = results.setdefault("tasks", {}).setdefault(task, {"metric": metric})
    teacher = work / task / "teacher"
    if "teacher" not in out and (teacher / "model").is_dir():
        out["teacher"] = {"test": evaluate(teacher / "model", files["test"]), "seconds": None}
        save()
    if "teacher" not in out or not (teacher / "model").is_dir():
        _, seconds = timed(lambda: bertkit("finetune", "--task", family, "--model", MINILM, "--out", teacher,
                                           "--lr", TEACHER_LR, *data_flags(task, files, finetune=True)))
        out["teacher"] = {"test": evaluate(teacher / "model", files["test"]), "seconds": round(seconds)}
        save()
    return out


def recipes(task: str, files: dict[str, Path], work: Path, results: dict[str, Any], save: Any) -> None:
    """The 3-layer student of `task` under each loss recipe: test score and seconds."""
    metric = SETTINGS[task][1]
    make_teacher(task, files, work, results, save)
    teacher = work / task / "teacher" / "model"
    out = results.setdefault("recipes", {}).setdefault(task, {"metric": metric})
    for name, flags in RECIPES.items():
        if name in out:
            continue
        folder = work / task / "recipe" / name.replace(" ", "_").replace(",", "").replace("=", "").replace("+", "plus")
        _, seconds = timed(lambda folder=folder, flags=flags: bertkit(
            "distill", "--teacher", teacher, "--student", STUDENTS["3 layers"], "--out", folder, "--lr", STUDENT_LR,
            *data_flags(task, files), *flags))
        out[name] = {"test": evaluate(folder / "model", files["test"]), "seconds": round(seconds)}
        save()


SPEED_ROUNDS, SPEED_SECONDS = 3, 10  # serving: each model in turn, round after round (the ratio is per round)


def speed(task: str, work: Path, files: dict[str, Path], results: dict[str, Any], save: Any, quick: bool) -> None:
    """Each size's int8 export: the batch-1 forward in onnxruntime; where an input's time goes in groups of 16
    (onnxruntime against the rest of the pipeline, and the server's `prepare` of a request); and `bertkit serve` at 32
    clients (an input of the task's test data a request), the models' servers taking turns for SPEED_ROUNDS
    rounds, so that a slow spell of the shared machine falls on every model alike."""
    import asyncio

    from bertkit import pipeline

    from .loadgen import flood, json_body, summary
    from .serve_api import start, stop

    out = results["tasks"][task].setdefault("speed", {})
    folders = {"teacher (6 layers)": work / task / "teacher" / "model", "3 layers": work / task / "distilled-3" / "model",
               "2 layers": work / task / "distilled-2" / "model"}
    folders = {name: folder for name, folder in folders.items() if folder.is_dir()}
    if all("rounds" in out.get(name, {}) for name in folders):
        return
    pipe = pipeline(folders["teacher (6 layers)"])
    examples = pipe.task.read(files["test"])
    inputs = [_served_input(pipe.task, e) for e in examples.examples[:400]]
    exported = {name: folder.parent / "int8" for name, folder in folders.items()}
    for name, folder in folders.items():
        if not (exported[name] / "model.onnx").is_file():
            bertkit("export", "--model", folder, "--out", exported[name], "--quantize", "int8")
    one = batch1_ms(exported, inputs[: 100 if quick else 300])
    split = split_ms(exported, inputs)
    for name in exported:
        out[name] = {"batch1_ms": one[name], "split_ms": split[name]}
    servers = {name: start(["--model", str(folder)]) for name, folder in exported.items()}
    rates: dict[str, list[float]] = {name: [] for name in servers}
    loop_ms: dict[str, list[float]] = {name: [] for name in servers}  # the event loop's CPU a request
    errors = dict.fromkeys(servers, 0)
    seconds = 4 if quick else SPEED_SECONDS
    try:
        for _ in range(1 if quick else SPEED_ROUNDS):
            for name, (proc, port) in servers.items():
                before = thread_cpu_s(proc.pid)
                load = summary(asyncio.run(flood(port, 32, seconds, "/v1/predict",
                                                 lambda c, k: json_body({"inputs": [inputs[(c * 13 + k) % len(inputs)]]}))),
                               seconds)
                rates[name].append(load["ok_per_s"])
                loop_ms[name].append(1000 * (thread_cpu_s(proc.pid) - before) / max(load["ok_per_s"] * seconds, 1))
                errors[name] += load["server_errors"] + load["broken"]
    finally:
        for proc, _ in servers.values():
            stop(proc)
    teacher = rates["teacher (6 layers)"]
    for name in servers:
        out[name].update({"rounds": rates[name], "serve_per_s": statistics.median(rates[name]), "errors": errors[name],
                          "vs_teacher": statistics.median(r / t for r, t in zip(rates[name], teacher, strict=True)),
                          "event_loop_ms": round(statistics.median(loop_ms[name]), 3)})
    save()


def thread_cpu_s(pid: int) -> float:
    """The CPU seconds so far of a process's main thread (a server's event loop: HTTP, JSON, admission, the token
    count; the model runs in other threads)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch1_ms(exported: dict[str, Path], inputs: list[Any], block: int = 50) -> dict[str, float]:
    """Each model's median time for one input alone through its exported pipeline, the models taking turns by
    blocks of `block` inputs (a turn per input would evict each model's weights from the cache for the next)."""
    from bertkit import pipeline

    pipes = {name: pipeline(folder, batch_size=1) for name, folder in exported.items()}
    times: dict[str, list[float]] = {name: [] for name in pipes}
    for at in range(0, len(inputs), block):
        for name, pipe in pipes.items():
            for item in inputs[at : at + 10]:  # warm again after the other models' turns
                pipe.predict([item])
            for item in inputs[at : at + block]:
                t0 = time.perf_counter()
                pipe.predict([item])
                times[name].append(time.perf_counter() - t0)
    return {name: round(1000 * statistics.median(t), 3) for name, t in times.items()}


def split_ms(exported: dict[str, Path], inputs: list[Any], group: int = 16) -> dict[str, dict[str, float]]:
    """Milliseconds an input spends in onnxruntime, in the rest of the pipeline (reading, tokenizing, batching,
    decoding), and of that in the server's `prepare` (reading and tokenizing a request of one input), run as the
    server runs them: each input prepared on its own, in groups of `group` through the model: the fastest of
    three passes over `inputs`, the models taking turns pass by pass."""
    from bertkit.server.adapters import TaskModel

    in_ort = [0.0]

    def timing(inner: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            answer = inner(*args, **kwargs)
            in_ort[0] += time.perf_counter() - t0
            return answer
        return run

    models = {name: TaskModel(folder, "cpu", "fp32", 32, 8192) for name, folder in exported.items()}
    groups = [inputs[i : i + group] for i in range(0, len(inputs), group)]
    best: dict[str, tuple[float, float, float]] = {}
    for model in models.values():
        model.pipe.backend.run = timing(model.pipe.backend.run)
        for g in groups[:3]:
            model.run([model.prepare([item]).features for item in g])
    for _ in range(3):
        for name, model in models.items():
            in_ort[0], in_prepare = 0.0, 0.0
            t0 = time.perf_counter()
            for g in groups:
                t1 = time.perf_counter()
                features = [model.prepare([item]).features for item in g]
                in_prepare += time.perf_counter() - t1
                model.run(features)
            took = (time.perf_counter() - t0, in_ort[0], in_prepare)
            best[name] = min(best.get(name, took), took)
    out = {}
    for name, took in best.items():
        whole, ort, prepare = (1000 * x / len(inputs) for x in took)
        out[name] = {"onnxruntime": round(ort, 3), "rest": round(whole - ort, 3), "prepare": round(prepare, 3)}
    return out


def _served_input(task: Any, example: Any) -> Any:
    """A test example as the server's /v1/predict takes it."""
    first, second = task.texts_of(example)
    if task.second == "context":
        return {"question": first, "context": second}
    if second is not None:
        return [first, second]
    return " ".join(first) if isinstance(first, tuple) else first


def epoch_cost(work: Path, files: dict[str, Path], results: dict[str, Any], save: Any) -> None:
    """One epoch of the 3-layer student on sst2: distilled with the teacher's outputs cached (the cache made
    beforehand) against fine-tuned alone, in turn, twice each."""
    if "epoch cost" in results:
        return
    teacher = work / "sst2" / "teacher" / "model"
    common = ["--train", files["train"], "--dev", files["dev"], "--epochs", "1", "--lr", STUDENT_LR, "train.progress=false"]
    cached = work / "cost" / "distilled"
    bertkit("distill", "--teacher", teacher, "--student", STUDENTS["3 layers"], "--out", cached, *common)  # the cache
    rounds: dict[str, list[float]] = {"distilled": [], "alone": []}
    for _ in range(2):
        for name in rounds:
            if name == "distilled":
                for path in (cached / "run" / "checkpoints", cached / "run" / "model", cached / "run" / "log.jsonl"):
                    subprocess.run(["rm", "-rf", str(path)], check=True)
                args = ["distill", "--teacher", teacher, "--student", STUDENTS["3 layers"], "--out", cached, "--resume", *common]
            else:
                args = ["finetune", "--task", "classify", "--model", pretrained_layers(work, [0, 2, 4]), "--out",
                        work / "cost" / "alone", *common]
            t0 = time.perf_counter()
            bertkit(*args)
            rounds[name].append(time.perf_counter() - t0)
    results["epoch cost"] = {"seconds": rounds, "ratio": round(min(rounds["distilled"]) / min(rounds["alone"]), 2)}
    save()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--recipes", action="store_true", help="compare loss recipes on sst2 and conll first")
    parser.add_argument("--only-recipes", action="store_true", help="the recipe comparison alone (it sets the defaults)")
    parser.add_argument("--recipe", nargs="*", default=[], help="distill flags for every student (default: the defaults)")
    parser.add_argument("--sizes", nargs="+", default=["3", "2"], choices=["3", "2"], help="student sizes (layers)")
    parser.add_argument("--augment-model", type=Path, help="a masked LM: also distill sst2's 3-layer student with "
                                                           f"{AUGMENT} augmented copies of each input")
    parser.add_argument("--speed", action="store_true", help="then time each size (int8 forward, serving, an epoch)")
    parser.add_argument("--quick", action="store_true", help="shorter speed measurements")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "distill-bench")
    args = parser.parse_args(argv)
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}

    def save() -> None:
        results.update({"command": "python -m bench.distill " + " ".join(argv or sys.argv[1:]), "machine": machine(),
                        "date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
                        "recipe": args.recipe or "the defaults"})
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")

    files = data(args.work)
    for task in args.tasks:  # the scores first, then the timings (each on a machine doing nothing else)
        print(f"== {task}", file=sys.stderr)
        if args.recipes and task in ("sst2", "conll"):
            recipes(task, files[task], args.work, results, save)
        if not args.only_recipes:
            run_task(task, files[task], args.work, results, save, args.recipe, args.sizes, args.augment_model)
        print(json.dumps(results.get("tasks", {}).get(task), indent=1), file=sys.stderr)
    if args.speed:
        for task in args.tasks:
            speed(task, args.work, files[task], results, save, args.quick)
        epoch_cost(args.work, files["sst2"], results, save)


if __name__ == "__main__":
    main()


# ---- bench/RESULTS.md ------------------------------------------------------------------------------------------

TASK_NAMES = {"sst2": "SST-2 (classify, accuracy)", "mrpc": "MRPC (pair, F1)", "conll": "CoNLL-2003 (ner, F1)",
              "squad": "SQuAD v1.1 (qa, F1)"}


def section(data: dict[str, Any]) -> str:
    """Section 10 of bench/RESULTS.md, from bench/results/distill.json."""
    from .report import table

    m = data["machine"]
    commands = data.get("commands") or [data["command"].strip()]
    lines = ["## 10. Distillation (bench/distill.py)", "",
             f"Measured by {'; '.join(f'`{c}`' for c in commands)}, last on {data['date']} ({m.get('cpu')}, {data['cores']} cores, torch "
             f"{m.get('torch')}). Teachers: all-MiniLM-L6-v2 fine-tuned by bertkit; students: `layers:0,2,4` and "
             "`layers:0,3` of the teacher, distilled with the default recipe (soft targets at T=4 and the labels, "
             "weight 1 each); \"alone\": MiniLM's pre-trained layers "
             "0, 2, 4 (0, 3) fine-tuned on the labels with the same settings. Test scores by `bertkit evaluate` on "
             "held-out data (the script's docstring has the splits).", ""]
    rows, targets = [], []
    kept_all, beats = [], 0
    for task, r in data.get("tasks", {}).items():
        metric = r["metric"]

        def score(key: str, r: dict[str, Any] = r, metric: str = metric) -> float | None:
            return r[key]["test"][metric] if key in r else None

        t = score("teacher")
        row = [TASK_NAMES.get(task, task), _f(t)]
        for size in ("3 layers", "2 layers"):
            d, a = score(f"{size} distilled"), score(f"{size} alone")
            row += [_f(d) + (f" ({100 * d / t:.1f}%)" if d is not None and t else ""), _f(a),
                    f"{d - a:+.2f}" if d is not None and a is not None else "?"]
        u, at = score("3 layers distilled + unlabeled"), ""
        if u is None and (u := score("3 layers distilled + unlabeled, T=2")) is not None:
            at = " at T=2"  # measured before the default became T=4
        row.append(_f(u) + (f" ({100 * u / t:.1f}%){at}" if u is not None and t else ""))
        rows.append(row)
        d3, a3 = score("3 layers distilled"), score("3 layers alone")
        if d3 is not None and t:
            kept_all.append((task, 100 * d3 / t))
        if d3 is not None and a3 is not None and d3 - a3 >= 1:
            beats += 1
    lines += [table(["task", "teacher (6 layers)", "3 layers distilled (kept)", "3 alone", "gain", "2 layers distilled (kept)",
                     "2 alone", "gain", "3 layers + unlabeled"], rows), ""]
    sst2 = data.get("tasks", {}).get("sst2", {})
    augmented = sst2.get(f"3 layers distilled + {AUGMENT} augmented copies")
    if augmented and "teacher" in sst2:
        a, t = augmented["test"]["accuracy"], sst2["teacher"]["test"]["accuracy"]
        lines += [f"TinyBERT's augmentation (bench/augment.py, {AUGMENT} copies of each training sentence, the masked LM "
                  f"`{augmented['augment_model']}`: MiniLM-L6 given an MLM head and 30 minutes of pre-training): the "
                  f"3-layer sst2 student scores {a:.2f} ({100 * a / t:.1f}% kept) against "
                  f"{sst2['3 layers distilled']['test']['accuracy']:.2f} without it: it did not pay, and is not in bertkit.", ""]
    speed_rows, bounds = [], []
    for task, r in data.get("tasks", {}).items():
        sp = r.get("speed", {})
        for name, s in sp.items():
            speed_rows.append([task, name, s["batch1_ms"], s["serve_per_s"], f"{s['vs_teacher']:.2f}x",
                               f"{s['split_ms']['onnxruntime']:.2f} + {s['split_ms']['rest']:.2f}", s["event_loop_ms"],
                               s["errors"]])
        if "teacher (6 layers)" in sp and "3 layers" in sp:
            (t, t_loop), (h, h_loop) = ((sp[n]["split_ms"], sp[n]["event_loop_ms"]) for n in ("teacher (6 layers)", "3 layers"))
            total_t, total_h = t["onnxruntime"] + t["rest"] + t_loop, h["onnxruntime"] + h["rest"] + h_loop
            fixed = total_t - t["onnxruntime"] + max(0.0, 2 * h["onnxruntime"] - t["onnxruntime"])  # onnxruntime: F + 6m, F + 3m
            bounds.append(f"{task} {fixed:.2f} of {total_t:.2f} ms ({100 * fixed / total_t:.0f}%): at most "
                          f"**{total_t / total_h:.2f}x**, served {sp['3 layers']['vs_teacher']:.2f}x")
    if speed_rows:
        rounds = next((len(s["rounds"]) for r in data["tasks"].values() for s in r.get("speed", {}).values() if "rounds" in s), 1)
        lines += ["Each size's int8 export: the batch-1 forward (the pipeline on one input, median over test inputs); "
                  "`bertkit serve` at 32 clients, an input of the task's test data a request, each model's server in "
                  f"turn for {rounds} rounds of {SPEED_SECONDS} s (requests/s: the median round; against the teacher: "
                  "the median of the rounds' ratios); and where an input's time goes in groups of 16 as the server "
                  "runs them: milliseconds in onnxruntime + outside it (reading, tokenizing, batching, decoding); "
                  "and the server's event loop's CPU milliseconds a request (HTTP, JSON, admission and the token "
                  "count for the batcher, a second tokenization) while serving.", "",
                  table(["task", "model", "batch-1 ms", "serve requests/s", "vs the teacher", "ms an input: model + rest",
                         "event loop ms a request", "errors"], speed_rows), ""]
    if bounds:
        lines += ["Why serving gains less than the layers: part of a request's time does not depend on the layers, "
                  "and halving the layers halves only the rest. Fixed are the event loop's work (HTTP, JSON, "
                  "admission, the token count), the pipeline's Python (tokenizing, batching, decoding), and inside "
                  "onnxruntime the embeddings, the head and each call's own cost (its time fitted as F + layers x m "
                  "to the 6- and 3-layer models; 0 where the fit gives less). On 2 cores the event loop and the model share the CPU, so these "
                  "add up. The teacher's fixed share of a request, and the ratio it leaves the 3-layer student: "
                  + "; ".join(bounds) + ".", ""]
    if "recipes" in data:
        recipe_rows = [[task, name, _f(v["test"][r["metric"]]), v["seconds"]] for task, r in data["recipes"].items()
                       for name, v in r.items() if isinstance(v, dict)]
        lines += ["The 3-layer student under each loss recipe (test score; seconds of the whole run, on a machine not kept "
                  "quiet for them: rough):", "",
                  table(["task", "recipe", "test", "seconds"], recipe_rows), ""]
    if "epoch cost" in data:
        c = data["epoch cost"]
        lines += [f"One epoch of the 3-layer student on sst2, distilled from the cached teacher outputs against fine-tuned "
                  f"alone, in turn: {_secs(c['seconds']['distilled'])} s against {_secs(c['seconds']['alone'])} s, **{c['ratio']:.2f}x**.", ""]
    ok97 = [f"{t} {k:.1f}%" for t, k in kept_all]
    whole = len(kept_all) == len(SETTINGS)  # every task measured
    pending = f"pending ({len(kept_all)} of {len(SETTINGS)} tasks measured)"
    targets = [["3 layers keep >= 97% of the teacher on each task", ", ".join(ok97) or "?",
                _met(all(k >= 97 for _, k in kept_all)) if whole or any(k < 97 for _, k in kept_all) else pending],
               ["3 layers beat the same layers alone by >= 1 point on >= 3 of 4", f"{beats} of {len(kept_all)}",
                _met(beats >= 3) if whole or beats >= 3 else pending]]
    serve = {task: {name: s["vs_teacher"] for name, s in r.get("speed", {}).items()}
             for task, r in data.get("tasks", {}).items() if "teacher (6 layers)" in r.get("speed", {})}
    if serve:
        ratios = {task: s["3 layers"] for task, s in serve.items() if "3 layers" in s}
        targets.append(["3 layers' int8 serves >= 1.8x the teacher's at 32 clients",
                        ", ".join(f"{t} {r:.2f}x" for t, r in ratios.items()),
                        _met(all(r >= 1.8 for r in ratios.values())) + ("" if len(ratios) == len(SETTINGS) else
                                                                        f" ({len(ratios)} of {len(SETTINGS)} tasks)")])
        stretch = []
        for task, s in serve.items():
            r, d2 = data["tasks"][task], data["tasks"][task].get("2 layers distilled")
            if "2 layers" in s and d2 and "teacher" in r:
                kept = 100 * d2["test"][r["metric"]] / r["teacher"]["test"][r["metric"]]
                stretch.append((task, kept, s["2 layers"]))
        targets.append(["stretch: 2 layers keep >= 95% at >= 3x", ", ".join(f"{t} {k:.1f}% at {x:.2f}x" for t, k, x in stretch),
                        _met(all(k >= 95 and x >= 3 for _, k, x in stretch))])
    if "epoch cost" in data:
        targets.append(["a distilled epoch (cached) <= 1.3x one alone", f"{data['epoch cost']['ratio']:.2f}x",
                        _met(data["epoch cost"]["ratio"] <= 1.3)])
    lines += ["### Targets (issue 28)", "", table(["target", "measured", "status"], targets), ""]
    return "\n".join(lines)


def _secs(xs: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in xs)


def _f(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}"


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"
