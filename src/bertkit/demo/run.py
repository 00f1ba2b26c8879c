"""`bertkit demo`: BERT's whole story on built-in data, in about ten minutes on a laptop CPU.

A WordPiece vocabulary is learned from public-domain books, a tiny BERT is pre-trained on them
(masked LM + next sentence), then it and a randomly initialized twin are fine-tuned on the four
task families; the report shows what pre-training bought. Every stage leaves its result on disk,
so an interrupted demo picks up where it stopped.
"""

from __future__ import annotations

import json
import logging
import platform
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .. import settings
from ..errors import BertkitError
from ..fileio import atomic_write_text
from ..fillmask import FillMask
from ..finetune import FinetuneSettings, finetune
from ..heads import BertForPreTraining
from ..initialization import local_attention_init
from ..predict import evaluate_task, pipeline
from ..pretrain import PretrainSettings, pretrain
from ..pretraining import prepare
from ..runlog import read_log
from ..settings import one_of, option, positive
from ..tasks import get_task
from ..tokenizer import Tokenizer
from ..views.attention_maps import plot_attention
from .plots import plot_run
from .prose import TASKS
from .report import write_report
from .stats import paired_bootstrap

log = logging.getLogger("bertkit")

# Inputs shown through `predict` at the end, with the answer a reader expects: the paper's examples where the built-in
# tasks allow them. (text, pair or question's context, expected)
EXAMPLES: dict[str, dict[str, list[tuple[str, str | None, str]]]] = {
    "en": {  # classify: which of six books a sentence comes from; pair: does the sentence answer the question
        "classify": [("She was not at all in a humour to be pleased with her sister's engagement, nor with Mr. Elton's "
                      "compliments.", None, "emma"),
                     ("The whale rose beside the boat, and every harpooneer stood ready at the bow.", None, "moby_dick")],
        "pair": [("What's my name?", "My name is Clara and I live in Berkeley.", "entailment"),
                 ("What's my name?", "Berkeley is in California.", "not_entailment")],
        "qa": [("What's my name?", "My name is Clara and I live in Berkeley.", "Clara")],
        "ner": [("Emma walked with Mr. Knightley from Hartfield to Highbury before the rain came.", None,
                 "PER: Emma, Knightley; LOC: Hartfield, Highbury")],
    },
    "zh": {  # classify: which of three novels; pair: does the sentence answer the question
        "classify": [("却说张飞拿了丈八蛇矛，飞马直取吕布。", None, "sanguo"), ("宝玉听了，便往潇湘馆来看黛玉。", None, "honglou")],
        "pair": [("我叫什么名字？", "我叫克拉拉，住在伯克利。", "entailment"), ("我叫什么名字？", "伯克利在加利福尼亚。", "not_entailment")],
        "qa": [("我叫什么名字？", "我叫克拉拉，住在伯克利。", "克拉拉")],
        "ner": [("小明在北京大学的燕园看了中国男篮的一场比赛", None, "PER: 小明; LOC: 北京大学, 燕园")],
    },
}
# The four examples of a (Chinese) walkthrough of the BERT paper, exactly as it writes them and with its answers
# (English: their translations), each answered by models fine-tuned on a task where it makes sense: the review's
# sentiment (positive: it ends on praise), the NLI pair and the entities with organizations on the small template
# tasks of data/LANG/seed (the main tasks hold none of them; the templates hold neither these sentences nor their
# names, tests/test_demo_data.py), the question on the main QA task. (job, text, pair or context, expected)
SEEDS: dict[str, list[tuple[str, str, str | None, str]]] = {
    "en": [("sentiment", "The wontons taste terrible, order with care; the Qiaoshou mixed salad is recommended, "
                         "really good.", None, "positive"),
           ("nli", "Two women are hugging each other.", "Two women are showing affection.", "entailment"),
           ("qa", "What's my name?", "My name is Clara and I live in Berkeley.", "Clara"),
           ("entities", "Xiaoming watched a game of the Chinese men's basketball team at Yanyuan of Peking University.",
            None, "PER: Xiaoming; ORG: Chinese men's basketball team, Peking University; LOC: Yanyuan")],
    "zh": [("sentiment", "抄手很难吃，慎点，巧手大拌菜推荐，真的不错", None, "positive"),
           ("nli", "两个女人互相拥抱。", "两个女人在表达爱意。", "entailment"),
           ("qa", "我叫什么名字？", "我叫克拉拉，住在伯克利。", "克拉拉"),
           ("entities", "小明在北京大学的燕园看了中国男篮的一场比赛", None, "PER: 小明; ORG: 北京大学, 中国男篮; LOC: 燕园")],
}
FILL_MASK_SENTENCES = 4  # held-out sentences (the classification dev file: none of them was pre-trained on)


@dataclass(frozen=True)
class DemoSettings(settings.Settings):
    lang: str = option("en", "the language of the built-in data", check=one_of(*EXAMPLES))
    minutes: float = option(10.0, "time budget", check=positive)
    out: Path = option(Path("demo"), "output folder", shows="runs/demo-LANG")
    seed: int = option(0, "every random choice of the demo follows it")
    preset: str = "tiny"
    vocab_size: int = 8000
    progress: bool = True
    # a check that everything runs: a few steps and a sample of each task, in about a minute
    smoke: bool = option(False, "a quick check that everything runs (few steps, small samples)")
    reference: str | None = option(None, "also fine-tune a really pre-trained BERT (a Hugging Face name or a folder) "
                                         "on the same tasks: what pre-training at scale buys", metavar="MODEL")


def data_dir(lang: str) -> Path:
    """The built-in data of a language, shipped inside the package."""
    path = Path(str(resources.files("bertkit") / "data" / lang))
    if not path.is_dir():
        raise BertkitError(f"built-in data for {lang!r} is missing from the installed package ({path})")
    return path


class Stages:
    """Times and results of the demo's stages, kept in OUT/stages.json so that a rerun skips what is done."""

    def __init__(self, out: Path):
        self.path = out / "stages.json"
        self.done: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def run(self, name: str, fn, *args: Any, depends_on: Any = None, **kwargs: Any) -> Any:
        """fn's result, run now unless it ran before with the same `depends_on` (the settings it reads beyond the
        demo's own: a rerun with another --reference redoes the stages that involve the reference)."""
        if name in self.done and self.done[name].get("depends_on") == depends_on:
            log.warning("%s: done before (%.0f s), skipped", name, self.done[name]["seconds"])
            return self.done[name].get("result")
        log.warning("== %s", name)
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        self.done[name] = {"seconds": round(time.perf_counter() - t0, 1), "result": result}
        if depends_on is not None:
            self.done[name]["depends_on"] = depends_on
        atomic_write_text(self.path, json.dumps(self.done, indent=2, ensure_ascii=False, default=str) + "\n")
        return result

    def seconds(self, name: str) -> float:
        return self.done.get(name, {}).get("seconds", 0.0)


def demo(cfg: DemoSettings) -> Path:
    """Runs the demo into cfg.out; gives the path of report.html."""
    t0 = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    src = data_dir(cfg.lang)
    stages = Stages(out)
    budget = cfg.minutes * 60

    stages.run("vocabulary", _vocab, src, out / "vocab", cfg)
    stages.run("prepare", _prepare, src, out, cfg)
    spent = time.perf_counter() - t0
    # Pre-training gets most of the time; fine-tuning eight small runs takes the rest.
    pretrain_s = max(30.0, 0.7 * budget - spent)
    stages.run("pre-train", _pretrain, out, cfg, pretrain_s)
    stages.run("from-scratch twin", _scratch_twin, out, cfg)

    reference = stages.run("reference model", _reference, cfg, depends_on=cfg.reference) if cfg.reference else None
    inits = ("pretrained", "scratch", *(("reference",) if reference and "path" in reference else ()))
    results: dict[str, dict[str, Any]] = {}
    for job in JOBS:
        for init in inits:
            key = f"fine-tune {job} ({init})"
            results[key] = stages.run(key, _finetune, src, out, job, init, cfg, reference,
                                      depends_on=reference["path"] if init == "reference" else None)  # type: ignore[index]
        if job in TASKS:
            results[f"compare {job}"] = stages.run(f"compare {job}", _compare, src, out, job, cfg)
    shown = reference["path"] if "reference" in inits else None  # type: ignore[index]  # the stages showing every model's answers
    predictions = stages.run("predict", _predict, out, cfg, inits, depends_on=shown)
    predictions["seeds"] = stages.run("seed examples", _seed_examples, out, cfg, inits, depends_on=shown)
    inside = stages.run("look inside", _look_inside, src, out, cfg)

    total = sum(v["seconds"] for v in stages.done.values())  # over every run of the demo, if it was resumed
    report = write_report(out, cfg, stages.done, results, predictions, inside, baselines(cfg.lang), machine(), total,
                          reference)
    log.warning("demo done in %.1f min (this run %.1f min): %s", total / 60, (time.perf_counter() - t0) / 60, report)
    return report


# ---- stages ---------------------------------------------------------------------------------------

def _pretrain_files(src: Path) -> list[Path]:
    return sorted((src / "pretrain").glob("*.txt*"))


def _vocab(src: Path, out: Path, cfg: DemoSettings) -> dict[str, Any]:
    tok = Tokenizer.train_from_files(_pretrain_files(src), cfg.vocab_size, lowercase=True)
    tok.save_pretrained(out)
    return {"vocab_size": tok.vocab_size}


def _prepare(src: Path, out: Path, cfg: DemoSettings) -> dict[str, Any]:
    meta = prepare(_pretrain_files(src), out / "vocab", out / "data", max_seq_length=128, seed=cfg.seed + 12345,
                   lang=cfg.lang, eval_fraction=0.02, progress=cfg.progress)
    return {k: v for k, v in meta.get("counts", {}).items() if isinstance(v, int)}


def _pretrain_settings(out: Path, cfg: DemoSettings, seconds: float) -> PretrainSettings:
    return settings.load(PretrainSettings, overrides=[
        f"data.path={json.dumps(str(out / 'data'))}", f"model.preset={json.dumps(cfg.preset)}",
        # as many steps as the minutes allow (a smoke run: 12, well within them)
        f"train.steps={12 if cfg.smoke else 1_000_000}", f"train.minutes={seconds / 60:.3f}",
        # Heads that start on their neighbours (model.init=local): with BERT's uniform start, minutes of pre-training
        # leave a bag of words (docs/pretraining.md). Dropout off: a budget of minutes is far from over-fitting.
        "model.init=local", "train.batch_size=32", "optim.lr=1e-3", "optim.warmup=0.05", f"train.seed={cfg.seed}",
        "model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0",
        f"train.precision={'bf16' if _fast_bf16() else 'fp32'}",
        "checkpoint.every=100", "checkpoint.keep=1", "log.every=20", "log.eval_every=250", "data.eval_batches=8",
        f"log.progress={'true' if cfg.progress else 'false'}",
    ])


def _pretrain(out: Path, cfg: DemoSettings, seconds: float) -> dict[str, Any]:
    run = out / "pretrain"
    saved = settings.saved(run)
    # an interrupted pre-training continues from its checkpoint with its settings, in the time it had left
    pcfg = settings.load(PretrainSettings, saved) if saved is not None else _pretrain_settings(out, cfg, seconds)
    pretrain(pcfg, run, resume=saved is not None)
    plot_run(run, out / "pretrain.png", title="pre-training")
    rows = read_log(run / "log.jsonl")
    evals = [r for r in rows if "eval_mlm_acc" in r]
    last = evals[-1] if evals else {}
    return {"steps": rows[-1]["step"] if rows else 0, "mlm_acc": last.get("eval_mlm_acc"),
            "baseline": last.get("eval_mlm_baseline_acc"), "shuffled": last.get("eval_mlm_shuffled_acc"),
            "nsp_acc": last.get("eval_nsp_acc")}


def _fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX): then pre-training runs in bf16."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _scratch_twin(out: Path, cfg: DemoSettings) -> dict[str, Any]:
    """The same architecture, vocabulary and initialization as the pre-trained model started from, without the
    pre-training: what fine-tuning alone can do."""
    config = BertForPreTraining.from_pretrained(out / "pretrain" / "model").config
    torch.manual_seed(cfg.seed + 1)
    twin = BertForPreTraining(config)
    local_attention_init(twin.bert)
    twin.save_pretrained(out / "scratch")
    Tokenizer.from_pretrained(out / "pretrain" / "model").save_pretrained(out / "scratch")
    return {"parameters": twin.num_parameters()}


BOOTSTRAP = 1000  # resamples for each gain's interval

# What the demo fine-tunes: the four main tasks, then the seed examples' template tasks.
# job: (family, data folder, file extension, epochs, batch size, learning rate, max sequence length)
JOBS: dict[str, tuple[str, str, str, int, int, float, int]] = {
    "classify": ("classify", "classify", "tsv", 4, 32, 1e-3, 128),
    "pair": ("pair", "pair", "tsv", 4, 32, 1e-3, 128),
    "qa": ("qa", "qa", "json", 4, 32, 1e-3, 256),
    "ner": ("ner", "ner", "txt", 4, 32, 1e-3, 128),
    "sentiment": ("classify", "seed/sentiment", "tsv", 2, 32, 1e-3, 64),
    "nli": ("pair", "seed/nli", "tsv", 4, 32, 1e-3, 64),
    "entities": ("ner", "seed/entities", "txt", 2, 32, 1e-3, 64),
}
# A really pre-trained model gets the paper's fine-tuning grid at its longest (batch 16, 4 epochs) and its highest
# rate: the demo's tasks are small (296 NLI pairs), and all-MiniLM-L6-v2 at batch 32 for 3 epochs scored 44% on
# the NLI pairs and missed every place name (85% and 95.3 F1 at batch 16 for 4).
REFERENCE_LR, REFERENCE_EPOCHS, REFERENCE_BATCH = 5e-5, 4, 16


def _task_files(src: Path, out: Path, job: str, cfg: DemoSettings) -> tuple[Path, Path]:
    """The job's train and dev files (a smoke run: their first examples)."""
    _, folder, ext, *_ = JOBS[job]
    train, dev = src / folder / f"train.{ext}", src / folder / f"dev.{ext}"
    if cfg.smoke:
        return sample_file(train, out / "sample" / job), sample_file(dev, out / "sample" / job)
    return train, dev


def _reference(cfg: DemoSettings) -> dict[str, Any]:
    """The reference model's folder, or why there is none (offline with nothing cached: the demo goes on)."""
    from ..hub import resolve_model

    try:
        return {"name": cfg.reference, "path": str(resolve_model(cfg.reference))}
    except BertkitError as e:
        log.warning("no reference column: %s", e)
        return {"name": cfg.reference, "missing": str(e)}


def _finetune(src: Path, out: Path, job: str, init: str, cfg: DemoSettings,
              reference: dict[str, Any] | None = None) -> dict[str, Any]:
    family, _, _, epochs, batch, lr, max_len = JOBS[job]
    train, dev = _task_files(src, out, job, cfg)
    if init == "reference":
        lr, epochs, batch = REFERENCE_LR, REFERENCE_EPOCHS, REFERENCE_BATCH
    if cfg.smoke:
        epochs = 1
    model = {"pretrained": out / "pretrain" / "model", "scratch": out / "scratch",
             "reference": Path((reference or {}).get("path", ""))}[init]
    run_dir = out / "finetune" / f"{job}-{init}"
    recorded = run_dir / "settings.json"
    if init == "reference" and recorded.is_file() and json.loads(recorded.read_text())["model"] != str(model):
        shutil.rmtree(run_dir)  # fine-tuned from another reference model by an earlier run: not resumed
    ft = settings.load(FinetuneSettings, flags={
        "task.name": family, "model": model, "data.train": train, "data.dev": dev, "out": run_dir,
        "train.epochs": epochs, "train.batch_size": batch, "optim.lr": lr, "task.max_seq_length": max_len,
        "train.seed": cfg.seed, "train.progress": cfg.progress,
    })
    summary = finetune(ft, resume=True)
    return {"metric": summary["metric"], "dev": summary["best"]["dev"], "seconds": summary["runs"][0]["seconds"]}


def _compare(src: Path, out: Path, task: str, cfg: DemoSettings) -> dict[str, Any]:
    """Both fine-tuned models on the same dev examples: their scores again, and the 95% interval of the gain by
    a paired bootstrap over the examples (how far another dev set of the same kind could move it)."""
    runs = {init: pipeline(out / "finetune" / f"{task}-{init}" / "model") for init in ("scratch", "pretrained")}
    t = runs["pretrained"].task
    data = t.read(_task_files(src, out, task, cfg)[1])
    scores, predictions = {}, {}
    for init, run in runs.items():
        scores[init], predictions[init] = evaluate_task(run.backend, t, t.featurize(data, run.tokenizer, run.label2id))
    low, high = paired_bootstrap(t, data, predictions["scratch"], predictions["pretrained"], t.main_metric,
                                 resamples=BOOTSTRAP, seed=cfg.seed)
    return {"metric": t.main_metric, "scratch": scores["scratch"][t.main_metric],
            "pretrained": scores["pretrained"][t.main_metric], "low": low, "high": high, "resamples": BOOTSTRAP}


def sample_file(path: Path, folder: Path, n: int = 48) -> Path:
    """Gives a copy in `folder` of a task file's first n examples: table rows, CoNLL sentences, or SQuAD questions
    (whole paragraphs, so a few more), for a smoke run or a quick look."""
    out = folder / path.name
    folder.mkdir(parents=True, exist_ok=True)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data, kept, questions = json.loads(text), [], 0
        for article in data["data"]:
            paragraphs = []
            for paragraph in article["paragraphs"]:
                if questions >= n:
                    break
                paragraphs.append(paragraph)
                questions += len(paragraph["qas"])
            if paragraphs:
                kept.append({**article, "paragraphs": paragraphs})
        sample = json.dumps({**data, "data": kept}, ensure_ascii=False)
    elif path.suffix == ".txt":
        sample = "\n\n".join(text.split("\n\n")[:n]) + "\n"
    else:
        sample = "".join(text.splitlines(keepends=True)[: n + 1])
    atomic_write_text(out, sample)
    return out


def _predict(out: Path, cfg: DemoSettings, inits: tuple[str, ...] = ("pretrained", "scratch")) -> dict[str, Any]:
    """Every model's answers to the examples, beside the examples themselves and what a reader expects."""
    shown: dict[str, Any] = {}
    for task in TASKS:
        examples = EXAMPLES[cfg.lang][task]
        texts = [e[0] for e in examples]
        pairs = [e[1] for e in examples] if get_task(task).second is not None else None
        answers = {init: pipeline(out / "finetune" / f"{task}-{init}" / "model")(texts, pairs)  # type: ignore[arg-type]
                   for init in inits}
        shown[task] = [{"input": text, "pair": pair, "expected": expected,
                        **{init: answers[init][k] for init in answers}}
                       for k, (text, pair, expected) in enumerate(examples)]
    return shown


def _seed_examples(out: Path, cfg: DemoSettings, inits: tuple[str, ...]) -> list[dict[str, Any]]:
    """The walkthrough's examples, each answered by every model fine-tuned on its task, marked right or wrong."""
    shown = []
    for job, text, pair, expected in SEEDS[cfg.lang]:
        pipes = {init: pipeline(out / "finetune" / f"{job}-{init}" / "model") for init in inits}
        answers = {init: pipe([text], [pair] if pair else None)[0] for init, pipe in pipes.items()}
        shown.append({"job": job, "family": JOBS[job][0], "input": text, "pair": pair, "expected": expected,
                      **{init: {"answer": answers[init], "right": pipes[init].task.matches(answers[init], expected)}
                         for init in inits}})
    return shown


def _look_inside(src: Path, out: Path, cfg: DemoSettings) -> dict[str, Any]:
    """What pre-training learnt, seen directly: both models' guesses for a masked word of held-out sentences, and
    where the pre-trained model's heads look on the pair example."""
    sentences = masked_sentences(src / "classify" / "dev.tsv", Tokenizer.from_pretrained(out / "vocab"), cfg.lang)
    guesses = {init: FillMask(folder, top_k=5)([s for s, _ in sentences])
               for init, folder in (("pretrained", out / "pretrain" / "model"), ("scratch", out / "scratch"))}
    panel = [{"masked": s, "word": w, **{init: [g["token_str"] for g in guesses[init][k]] for init in guesses}}
             for k, (s, w) in enumerate(sentences)]
    text, pair, _ = EXAMPLES[cfg.lang]["pair"][0]  # a question (segment A) and the sentence that answers it (B)
    plot_attention(out / "pretrain" / "model", text, pair, out / "attention.png")
    return {"fill_mask": panel, "attention": {"text": text, "pair": pair, "picture": "attention.png"}}


def masked_sentences(path: Path, tok: Tokenizer, lang: str, n: int = FILL_MASK_SENTENCES) -> list[tuple[str, str]]:
    """Gives (sentence with one word as [MASK], the word) for the first short sentences of `path` that have a
    content word the vocabulary holds whole: the longest such word (a character, in Chinese)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        sentence = line.rsplit("\t", 1)[0]
        tokens = tok.tokenize(sentence)
        if not 6 <= len(tokens) <= 24:
            continue
        words = [t for t in tokens[1:] if not t.startswith("##") and (lang == "zh" or (t.isalpha() and len(t) > 3))]
        if not words or "[UNK]" in tokens:
            continue
        word = max(words, key=len)
        found = re.search(rf"\b{re.escape(word)}\b" if lang == "en" else re.escape(word), sentence, re.IGNORECASE)
        if found is None:
            continue
        out.append((sentence[: found.start()] + "[MASK]" + sentence[found.end() :], word))
        if len(out) == n:
            break
    return out


def baselines(lang: str) -> dict[str, Any]:
    """The simple baselines' dev scores on the built-in tasks (scripts/demo_baselines.py, at build time)."""
    path = data_dir(lang).parent / "baselines.json"
    return json.loads(path.read_text(encoding="utf-8"))[lang] if path.is_file() else {}


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "threads": str(torch.get_num_threads()), "python": platform.python_version(),
            "torch": torch.__version__, "os": platform.platform(), "bertkit": version()}


def version() -> str:
    """bertkit's version, with the git commit when it runs from a checkout (and whether its code had changes)."""
    from .. import __version__

    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return __version__

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "src")  # the code, not docs or results
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}, commit {commit}{' with uncommitted changes' if changed else ''}" if commit else __version__


