"""The words of the demo's report, in the report's language: its fixed sentences, and the claims it makes,
computed from its own numbers (how many gains are clear of zero, which models beat which baselines), so that
no sentence of a report can say more than its table."""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from ..tasks import FAMILIES

# The paper's four task families, which the demo fine-tunes (bertkit.tasks has more: embedders, rerankers)
TASKS = ("classify", "pair", "qa", "ner")

WORDS: dict[str, dict[str, Any]] = {
    "en": {
        "title": "bertkit demo (English)",
        "lead": "A {preset} BERT pre-trained for {steps} steps on built-in public-domain text, then fine-tuned on the four "
                "task families beside a randomly initialized twin (the same initialization, no pre-training){reference}.",
        "with_reference": ", and beside {name}, a model pre-trained at scale, fine-tuned on the same data with one setting "
                          "of the paper's fine-tuning grid (batch 16, rate 5e-5, 4 epochs){what}",
        "clear": "Pre-training wins clearly on **{k} of {n}** tasks{names}: the 95% interval of the gain lies above zero.",
        "unclear": "On {names} the pre-trained model scores higher, but the interval spans zero: another dev set of the "
                   "same kind could turn the gain around, so it is not counted.",
        "worse": "On {names} it scores lower.",
        "above": "The {minutes}-minute model beats the simple baseline on {names}.",
        "below": "It stays below the simple baseline on {names}.",
        "reference": "{name} beats the {minutes}-minute model on {better} and the simple baseline on {baseline}.",
        "no_reference": "No column for the reference model {name}: {why}",
        "none": "none",
        "and": " and ",
        "dev": "Every score is on the dev set each model's best epoch was chosen on (the task's metric after each epoch), "
               "so each is a little optimistic, every column alike. The interval is a paired bootstrap over the dev "
               "examples: how far another dev set of the same kind could move the gain; it does not cover the randomness "
               "of training (a rerun moves the scores by a few points). The baselines are measured on the same dev files "
               "when the data is built (scripts/demo_baselines.py).",
        "columns": "| task | metric | from scratch | pre-trained (this run) | gain | 95% interval of the gain | {reference}a simple baseline |",
        "mlm": "Held-out masked-LM accuracy after pre-training: **{acc}** (always guessing the most frequent token: {base}; "
               "with the words of each segment shuffled: {shuffled}, the drop from the first is what the model reads from "
               "word order, beyond which words occur); next-sentence accuracy {nsp}.",
        "seeds": "The walkthrough's examples",
        "seeds_lead": "The four examples of a walkthrough of the BERT paper, with its answers (this English demo asks "
                      "their translations), each answered by the models fine-tuned on a task where it makes sense. The "
                      "review, the NLI pair and the entities go to small template tasks (src/bertkit/data/{lang}/seed: "
                      "sentences made from a few templates and word lists, none of them the example or naming its "
                      "entities), since the main tasks hold none of their kinds. These are toy tasks: a ✓ on them shows "
                      "that a model has learnt the templates' pattern (a complaint then praise ends positive; a name in a "
                      "template's slot), recall of a pattern, not understanding. The question goes to the main QA task. "
                      "✓ right, ✗ wrong.",
        "seed_task": {"sentiment": "template reviews (toy)", "nli": "template NLI pairs (toy)",
                      "qa": "the main QA task", "entities": "template entity sentences (toy)"},
        "seed_name": {"sentiment": "the review", "nli": "the NLI pair", "qa": "the question", "entities": "the entities"},
        "wrong": "Wrong: {items}.", "wrong_item": "{model} on {examples}", "all_right": "Every model answers every example right.",
        "examples": "The main tasks' own examples",
        "examples_lead": "Sentences of the kinds each main task holds, with the answer a reader expects. ✓ right, ✗ wrong.",
        "what": {"classify": "which of six books a sentence comes from",
                 "pair": "does the sentence hold the answer to the question (QNLI-style, from SQuAD)",
                 "qa": "the answer's span in a short SQuAD context",
                 "ner": "persons and places in sentences of the books (silver labels from name lists)"},
        "task": "task", "to": "to",
        "pictures": {"attention": "attention of every head", "pretrain": "pre-training curves",
                     "finetune": "fine-tuning curves"},
        "input": "input", "expected": "expected", "pretrained": "pre-trained (this run)", "scratch": "from scratch",
        "fill_mask": "What pre-training learnt: the masked word",
        "fill_mask_lead": "Held-out sentences (from the classification dev file, which pre-training never saw) with one "
                          "word masked, and each model's five likeliest tokens (`bertkit fill-mask`):",
        "sentence": "sentence", "word": "the word",
        "attention": "Where the pre-trained model looks",
        "attention_lead": "`bertkit attention` on the pair \"{text}\" / \"{pair}\": the input representation as the paper's "
                          "Figure 2 draws it, then every head of every layer; the caption under the maps says how to read "
                          "them.",
        "pretraining": "Pre-training", "finetuning": "Fine-tuning (dev metric after every epoch)",
        "timings": "Timings", "stage": "stage", "seconds": "seconds", "total": "total", "machine": "Machine",
        "command": "Command",
    },
    "zh": {
        "title": "bertkit 演示（中文）",
        "lead": "一个 {preset} 规模的 BERT 在内置的公版文本上预训练了 {steps} 步，再在四类任务上微调；旁边是一个随机初始化的"
                "孪生模型（初始化相同，没有预训练）{reference}。",
        "with_reference": "，以及在同样数据上、用论文微调网格中的一组设置（批大小 16，学习率 5e-5，4 轮）微调的大规模预训练模型 {name}{what}",
        "clear": "预训练在 **{n} 个任务中的 {k} 个**上明显胜出{names}：增益的 95% 区间在零以上。",
        "unclear": "在{names}上预训练模型得分更高，但区间跨过零：换一份同类的开发集，增益可能反过来，所以不计入。",
        "worse": "在{names}上它得分更低。",
        "above": "{minutes} 分钟的模型在{names}上胜过简单基线。",
        "below": "在{names}上它仍低于简单基线。",
        "reference": "{name} 在{better}上胜过 {minutes} 分钟的模型，在{baseline}上胜过简单基线。",
        "no_reference": "没有参照模型 {name} 这一列：{why}",
        "none": "没有任务",
        "and": "和",
        "dev": "所有分数都在用来挑选每个模型最佳轮次的开发集上（每轮之后看任务的指标），因此都略为乐观，各列相同。区间是在开发集"
               "样本上的配对自助法：换一份同类的开发集，增益可能移动多少；它不包括训练本身的随机性（重跑一次，分数会差几个点）。"
               "简单基线在构建数据时于同样的开发集上测得（scripts/demo_baselines.py）。",
        "columns": "| 任务 | 指标 | 从零训练 | 预训练（本次） | 增益 | 增益的 95% 区间 | {reference}简单基线 |",
        "mlm": "预训练后在留出数据上的掩码预测准确率：**{acc}**（总猜最常见的词：{base}；把每段的词打乱后：{shuffled}，"
               "与前者之差就是模型从词序中读到的东西）；下一句预测准确率 {nsp}。",
        "seeds": "BERT 论文导读中的示例",
        "seeds_lead": "一篇 BERT 论文导读用来讲四类任务的四个示例，原样照录，期待的答案也是导读给的；每个示例由在合适任务上"
                      "微调的模型回答。评论、自然语言推理的句对和实体用小的模板任务（src/bertkit/data/{lang}/seed：由几个"
                      "模板和词表拼成的句子，其中没有这几个示例，也没有示例里的名字），因为主任务里没有这几类。这些是玩具"
                      "任务：在上面答对（✓）说明模型学会了模板的规律（先抱怨后称赞的评论算正面；模板槽位里的名字），是对"
                      "规律的记忆，不是理解。问题用主问答任务。✓ 对，✗ 错。",
        "seed_task": {"sentiment": "模板评论（玩具任务）", "nli": "模板句对（玩具任务）", "qa": "主问答任务",
                      "entities": "模板实体句（玩具任务）"},
        "seed_name": {"sentiment": "评论", "nli": "推理句对", "qa": "问题", "entities": "实体"},
        "wrong": "答错的：{items}。", "wrong_item": "{model}答错了{examples}", "all_right": "每个模型都答对了每个示例。",
        "examples": "主任务自己的示例",
        "examples_lead": "每个主任务所含类型的句子，以及读者期待的答案。✓ 对，✗ 错。",
        "what": {"classify": "一句话出自三部小说中的哪一部", "pair": "这句话是否含有问题的答案（仿 QNLI，取自 CMRC 2018）",
                 "qa": "在 CMRC 2018 的短上下文中找出答案的片段", "ner": "小说句子中的人名和地名（按名单自动标注）"},
        "task": "任务", "to": "至",
        "pictures": {"attention": "每个注意力头的注意力", "pretrain": "预训练曲线", "finetune": "微调曲线"},
        "metrics": {"accuracy": "准确率", "f1": "F1"},
        "baselines": {"bag-of-words logistic regression": "词袋逻辑回归",
                      "word-overlap logistic regression": "词重叠逻辑回归",
                      "the context sentence sharing most words with the question": "与问题共享词最多的上下文句子",
                      "train-lexicon lookup": "查训练集的名字表"},
        "stages": {"vocabulary": "词表", "prepare": "准备预训练数据", "pre-train": "预训练",
                   "from-scratch twin": "从零训练的孪生模型", "reference model": "参照模型", "predict": "预测示例",
                   "seed examples": "导读示例", "look inside": "看模型内部", "fine-tune": "微调", "compare": "比较",
                   "pretrained": "预训练", "scratch": "从零", "reference": "参照",
                   "sentiment": "模板情感", "nli": "模板推理", "entities": "模板实体"},
        "machine_keys": {"cpu": "处理器", "threads": "线程", "os": "系统"},
        "input": "输入", "expected": "期待的答案", "pretrained": "预训练（本次）", "scratch": "从零训练",
        "fill_mask": "预训练学到了什么：被遮住的词",
        "fill_mask_lead": "留出的句子（来自分类任务的开发集，预训练从未见过），遮住一个字，以及每个模型最可能的五个词"
                          "（`bertkit fill-mask`）：",
        "sentence": "句子", "word": "被遮住的字",
        "attention": "预训练模型在看哪里",
        "attention_lead": "`bertkit attention` 作用于句对“{text}” / “{pair}”：上方是论文图 2 那样的输入表示，下方是每一层的"
                          "每个头；图下的说明讲如何读这些图。",
        "pretraining": "预训练", "finetuning": "微调（每轮后的开发集指标）",
        "timings": "用时", "stage": "阶段", "seconds": "秒", "total": "总计", "machine": "机器",
        "command": "命令",
    },
}
TITLES = {"zh": {"classify": "单句分类", "pair": "句对分类", "qa": "抽取式问答", "ner": "命名实体识别"}}
# What a reference model is, where the demo knows it and it matters for reading its column.
KNOWN_REFERENCES = {
    "all-MiniLM-L6-v2": {
        "en": ". all-MiniLM-L6-v2 is a sentence-embedding model (a 6-layer BERT tuned by sentence-transformers on about "
              "a billion sentence pairs, NLI and question-answer pairs among them, SQuAD's included), so its "
              "sentence-pair and question-answering columns start from pairs of the kind those tasks are built from",
        "zh": "。all-MiniLM-L6-v2 是句向量模型（sentence-transformers 在约十亿个句对上调过的 6 层 BERT，其中有自然语言"
              "推理句对和问答对，包括 SQuAD 的），所以它在句对分类和抽取式问答两列上的起点，就是这两个任务所用的那类句对",
    },
}


def reference_note(name: str, lang: str) -> str:
    """What the reference model is, when the demo knows it (all-MiniLM-L6-v2), else nothing."""
    for known, note in KNOWN_REFERENCES.items():
        if name == known or name.endswith("/" + known):
            return note[lang]
    return ""


def stage_name(stage: str, lang: str) -> str:
    """A stage of the demo as the report's language says it ("fine-tune pair (scratch)" -> "微调句对分类（从零）")."""
    words = WORDS[lang].get("stages")
    if not words:
        return stage
    if stage in words:
        return words[stage]
    head, _, rest = stage.partition(" ")
    job, _, init = rest.partition(" (")
    job = TITLES[lang].get(job) or words.get(job, job)
    return words.get(head, head) + job + (f"（{words.get(init.rstrip(')'), init.rstrip(')'))}）" if init else "")


def task_title(task: str, lang: str) -> str:
    return TITLES.get(lang, {}).get(task) or FAMILIES[task].title


def _names(tasks: list[str], lang: str) -> str:
    w = WORDS[lang]
    names = [task_title(t, lang) for t in tasks]
    if not names:
        return w["none"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + w["and"] + names[-1] if lang == "en" else "、".join(names)


def claims(rows: list[dict[str, Any]], baselines: dict[str, Any], reference: dict[str, Any] | None, lang: str,
           minutes: float = 10.0, name: str | None = None) -> list[str]:
    """The report's sentences on its own table: the gains clear of zero (counted) and the others (not counted),
    the baselines beaten and not, and what the reference model (shown as `name`) does."""
    w = WORDS[lang]
    clear = [r["task"] for r in rows if r["low"] is not None and r["low"] > 0]
    unclear = [r["task"] for r in rows if r["gain"] > 0 and r["task"] not in clear]
    worse = [r["task"] for r in rows if r["gain"] <= 0]
    lines = [w["clear"].format(k=len(clear), n=len(rows),
                               names=f" ({_names(clear, lang)})" if clear and lang == "en" else
                               (f"（{_names(clear, lang)}）" if clear else ""))]
    if unclear:
        lines.append(w["unclear"].format(names=_names(unclear, lang)))
    if worse:
        lines.append(w["worse"].format(names=_names(worse, lang)))
    scored = [r for r in rows if baselines.get(r["task"])]
    above = [r["task"] for r in scored if r["pretrained"] > baselines[r["task"]]["score"]]
    below = [r["task"] for r in scored if r["task"] not in above]
    lines.append(("" if lang == "zh" else " ").join(s for s in (w["above"].format(names=_names(above, lang), minutes=f"{minutes:g}")
                                                               if above else "",
                                      w["below"].format(names=_names(below, lang)) if below else "") if s))
    if reference and "missing" in reference:
        lines.append(w["no_reference"].format(name=name or reference["name"], why=without_paths(reference["missing"])))
    elif reference:
        with_ref = [r for r in rows if r.get("reference") is not None]
        better = [r["task"] for r in with_ref if r["reference"] > r["pretrained"]]
        beats = [r["task"] for r in with_ref if baselines.get(r["task"]) and r["reference"] > baselines[r["task"]]["score"]]
        lines.append(w["reference"].format(name=name or reference["name"], better=_names(better, lang),
                                           baseline=_names(beats, lang), minutes=f"{minutes:g}"))
    return [line for line in lines if line]


def without_paths(text: str) -> str:
    """`text` without the absolute paths of this machine (a reader's has none of them): a path in parentheses is
    dropped, another one is cut to its last part."""
    text = re.sub(r" ?\((?:/|[A-Za-z]:\\)[^)]*\)", "", text)
    return re.sub(r"(?<![\w.])(?:/|[A-Za-z]:\\)[^\s;,)]+", lambda m: PurePath(m.group(0)).name or m.group(0), text)
