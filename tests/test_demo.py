"""`bertkit demo` end to end on a tiny budget, in both languages, and its resumption."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pictures import check, check_attention, run_layout

from bertkit.cli import main
from bertkit.demo import TASKS, DemoSettings, demo
from bertkit.demo.prose import WORDS, task_title


@pytest.fixture(scope="module")
def english_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished English smoke demo, without a reference model (its folder; tests copy it before changing it)."""
    out = tmp_path_factory.mktemp("demo") / "en"
    assert demo(DemoSettings(lang="en", out=out, smoke=True, progress=False)) == out / "report.html"
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.slow
def test_demo_runs_end_to_end_and_resumes(tmp_path: Path, lang: str, caplog, request: pytest.FixtureRequest) -> None:
    out = tmp_path / lang
    if lang == "en":
        shutil.copytree(request.getfixturevalue("english_demo"), out)
        report = out / "report.html"
    else:
        report = demo(DemoSettings(lang=lang, out=out, smoke=True, progress=False))
        assert report == out / "report.html"
    md = (out / "report.md").read_text(encoding="utf-8")
    words = WORDS[lang]  # the report speaks the demo's language
    for task in TASKS:
        assert task_title(task, lang) in md
    assert f"| **{words['total']}** |" in md and words["scratch"] in md and words["title"] in md
    html = report.read_text(encoding="utf-8")
    assert "<table>" in html and 'src="pretrain.png"' in html and 'src="finetune.png"' in html
    # pre-training's curves, a panel per metric group its log holds (loss, MLM and NSP accuracy, learning rate,
    # throughput), and a fine-tuning panel per task, each showing its points
    assert run_layout(out / "pretrain" / "log.jsonl") == [2, 2, 1]
    check(out / "pretrain.png", [2, 2, 1])
    check(out / "finetune.png", [len(TASKS)])
    stages = json.loads((out / "stages.json").read_text())
    assert list(stages) == ["vocabulary", "prepare", "pre-train", "from-scratch twin",
                            *[s for t in TASKS for s in (f"fine-tune {t} (pretrained)", f"fine-tune {t} (scratch)", f"compare {t}")],
                            *[s for t in ("sentiment", "nli", "entities")
                              for s in (f"fine-tune {t} (pretrained)", f"fine-tune {t} (scratch)")],
                            "predict", "seed examples", "look inside"]
    # pre-training's time budget: 70% of the demo's 10 minutes, less what the vocabulary and prepare took (the smoke
    # run's 12 steps end first)
    pretraining = json.loads((out / "pretrain" / "settings.json").read_text())["train"]
    spent = stages["vocabulary"]["seconds"] + stages["prepare"]["seconds"]
    assert pretraining["minutes"] * 60 == pytest.approx(max(30.0, 0.7 * 600 - spent), abs=1.0) and pretraining["steps"] == 12
    for task in TASKS:  # every fine-tuned model loads back and predicts
        assert (out / "finetune" / f"{task}-pretrained" / "model" / "bertkit_task.json").is_file()
        # the saved models score on the dev file what fine-tuning reported, and the gain gets its interval
        compare = stages[f"compare {task}"]["result"]
        for init in ("pretrained", "scratch"):
            reported = stages[f"fine-tune {task} ({init})"]["result"]["dev"][compare["metric"]]
            assert compare[init] == pytest.approx(reported, abs=1e-6)
        assert compare["low"] <= compare["pretrained"] - compare["scratch"] <= compare["high"] or compare["low"] == compare["high"]
    # the claims are the table's: the gains counted are those whose interval lies above zero
    clear = sum(stages[f"compare {t}"]["result"]["low"] > 0 for t in TASKS)
    assert (f"**{clear} of 4**" if lang == "en" else f"**4 个任务中的 {clear} 个**") in md
    # the walkthrough's examples, each with what every model answered, marked right or wrong, and the wrong ones named
    from bertkit.demo.run import SEEDS

    seeds = stages["seed examples"]["result"]
    assert [s["input"] for s in seeds] == [text for _, text, _, _ in SEEDS[lang]]
    for shown in seeds:
        assert shown["input"] in md and set(shown) >= {"pretrained", "scratch"}
    assert md.count(" ✓") + md.count(" ✗") >= 2 * len(seeds)
    wrong = [s["job"] for s in seeds if not s["pretrained"]["right"]]
    named = [line for line in md.splitlines() if line.startswith((words["wrong"].split("{")[0], words["all_right"]))]
    assert len(named) == 1 and all(words["seed_name"][job] in named[0] for job in wrong), named
    # what the report shows: every example's input and expected answer beside both models' answers; a simple baseline
    # for each task; the masked-word panel; an attention picture
    from bertkit.demo.run import EXAMPLES, baselines, data_dir

    for task in TASKS:
        for text, _, expected in EXAMPLES[lang][task]:
            assert text in md and f"| {expected} |" in md
        baseline = baselines(lang)[task]  # named in the report's language
        assert f"{baseline['score']:.1f} ({words.get('baselines', {}).get(baseline['baseline'], baseline['baseline'])})" in md
    inside = stages["look inside"]["result"]
    assert len(inside["fill_mask"]) == 4 and f"## {words['fill_mask']}" in md
    dev = (data_dir(lang) / "classify" / "dev.tsv").read_text(encoding="utf-8").lower()
    for row in inside["fill_mask"]:
        assert row["masked"].count("[MASK]") == 1 and len(row["pretrained"]) == len(row["scratch"]) == 5
        assert row["masked"].replace("[MASK]", row["word"]).lower() in dev  # a held-out sentence, one word masked
    # where the pre-trained model's heads look: the input representation above a map per head, a row per layer
    model = json.loads((out / "pretrain" / "model" / "config.json").read_text())
    check_attention(out / "attention.png", model["num_hidden_layers"], model["num_attention_heads"])
    assert 'src="attention.png"' in html

    # an interrupted demo resumes: drop the last stages, run again, only they run
    for key in ("predict", "fine-tune ner (scratch)"):
        del stages[key]
    (out / "stages.json").write_text(json.dumps(stages))
    caplog.clear()
    assert main(["demo", "--lang", lang, "--out", str(out), "--smoke"]) == 0
    err = caplog.text
    assert "pre-train: done before" in err and "== fine-tune ner (scratch)" in err and "== predict" in err


@pytest.mark.slow
def test_the_reference_column_and_its_absence(english_demo: Path, tmp_path: Path, tiny_model: Path, monkeypatch,
                                              caplog) -> None:
    """--reference fine-tunes another model on the same tasks as a third column (added to a finished demo, only
    what involves the reference runs; another reference replaces it); offline with nothing cached, the report says
    so in one line and the rest runs."""
    out = tmp_path / "with"
    shutil.copytree(english_demo, out)
    other = tmp_path / "other-reference"
    shutil.copytree(tiny_model, other)
    for reference in (other, tiny_model):
        caplog.clear()
        demo(DemoSettings(lang="en", out=out, smoke=True, progress=False, reference=str(reference)))
        ran = {r.getMessage()[3:] for r in caplog.records if r.getMessage().startswith("== ")}
        assert ran == {"reference model", "predict", "seed examples",
                       *(f"fine-tune {task} (reference)" for task in (*TASKS, "sentiment", "nli", "entities"))}, ran
    md = (out / "report.md").read_text(encoding="utf-8")
    stages = json.loads((out / "stages.json").read_text())
    # named by its folder's name, never by a path of this machine (the report is read on others)
    assert f"| {tiny_model.name} | a simple baseline |" in md and f"--reference {tiny_model.name}`" in md
    assert str(tiny_model) not in md and str(other) not in md and other.name not in md
    for task in (*TASKS, "sentiment", "nli", "entities"):
        assert stages[f"fine-tune {task} (reference)"]["depends_on"] == str(tiny_model)
        settings = json.loads((out / "finetune" / f"{task}-reference" / "settings.json").read_text())
        assert settings["model"] == str(tiny_model)
    assert all("reference" in s for s in stages["seed examples"]["result"])
    from huggingface_hub import constants  # read once at import: the environment alone would come too late

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    out = tmp_path / "without"
    shutil.copytree(english_demo, out)
    demo(DemoSettings(lang="en", out=out, smoke=True, progress=False, reference="google/bert_uncased_L-4_H-256_A-4"))
    md = (out / "report.md").read_text(encoding="utf-8")
    lines = [line for line in md.splitlines() if "No column for the reference model" in line]
    assert len(lines) == 1 and "google/bert_uncased_L-4_H-256_A-4" in lines[0] and "HF_HUB_OFFLINE is set" in lines[0]
    assert "(reference)" not in (out / "stages.json").read_text()


def test_the_report_names_a_reference_by_its_name_and_says_the_minutes(tmp_path: Path) -> None:
    from bertkit.demo.prose import claims, reference_note, stage_name, without_paths
    from bertkit.demo.report import reference_name

    assert reference_name({"name": "sentence-transformers/all-MiniLM-L6-v2"}) == "sentence-transformers/all-MiniLM-L6-v2"
    folder = tmp_path / "all-MiniLM-L6-v2"
    folder.mkdir()
    assert reference_name({"name": str(folder), "path": str(folder)}) == "all-MiniLM-L6-v2"
    (folder / "README.md").write_text("---\nlibrary_name: bertkit\n---\n\n# my-reader\n\nA BERT.\n", encoding="utf-8")
    assert reference_name({"name": str(folder), "path": str(folder)}) == "my-reader"  # its card's name
    (tmp_path / "run" / "model").mkdir(parents=True)
    assert reference_name({"name": str(tmp_path / "run" / "model")}) == "run/model"
    assert "sentence-embedding" in reference_note("sentence-transformers/all-MiniLM-L6-v2", "en")
    assert reference_note("bert-base-chinese", "zh") == ""
    why = "x: no such model folder, and no model of that name in the cache (/root/.cache/hub); offline"
    assert without_paths(why) == "x: no such model folder, and no model of that name in the cache; offline"
    rows = [{"task": "ner", "gain": 5.0, "low": 1.0, "high": 9.0, "pretrained": 80.0, "reference": 90.0}]
    baselines = {"ner": {"score": 60.0, "baseline": "train-lexicon lookup"}}
    for lang, said in (("en", "The 3-minute model"), ("zh", "3 分钟的模型")):
        text = " ".join(claims(rows, baselines, {"name": "m", "path": "p"}, lang, minutes=3, name="m"))
        assert said in text and "ten-minute" not in text and "十分钟" not in text
    assert stage_name("fine-tune pair (scratch)", "zh") == "微调句对分类（从零）"
    assert stage_name("fine-tune pair (scratch)", "en") == "fine-tune pair (scratch)"
