"""Twin models: a bertkit model and the transformers model of the same class, loaded from the folder
bertkit saved, so both start from identical weights (checked on a small batch before timing)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import torch
import transformers

import bertkit
from bertkit.model import Pretrained

transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bars in the bench's output

KINDS = {  # bertkit class -> transformers class
    "pretraining": (bertkit.BertForPreTraining, transformers.BertForPreTraining),
    "model": (bertkit.BertModel, transformers.BertModel),
    "classification": (bertkit.BertForSequenceClassification, transformers.BertForSequenceClassification),
}


def twins(kind: str, config: bertkit.BertConfig | None = None, from_dir: Path | None = None,
          seed: int = 0) -> tuple[Pretrained, torch.nn.Module]:
    """Gives (bertkit model, transformers model with sdpa attention) holding the same weights, in
    training mode. The bertkit model is fresh from `config`, or loaded from `from_dir` (a HF folder)."""
    ours, theirs = KINDS[kind]
    torch.manual_seed(seed)
    if from_dir is not None:
        logging.getLogger("bertkit").setLevel(logging.ERROR)  # the fresh classifier head is expected
        bk = ours.from_pretrained(from_dir, **({} if config is None else {"id2label": config.id2label}))
    else:
        bk = ours(config)
    with tempfile.TemporaryDirectory() as tmp:
        bk.save_pretrained(tmp)
        hf, info = theirs.from_pretrained(tmp, attn_implementation="sdpa", dtype=torch.float32,
                                          output_loading_info=True)
    missing = [k for k in info["missing_keys"] if "position_ids" not in k]
    if missing or info["mismatched_keys"]:
        raise RuntimeError(f"transformers did not load every weight bertkit saved: {missing} {info['mismatched_keys']}")
    check_same_outputs(kind, bk, hf)
    return bk.train(), hf.train()


@torch.no_grad()
def check_same_outputs(kind: str, bk: torch.nn.Module, hf: torch.nn.Module) -> None:
    """Raises unless both models give the same outputs (eval mode, fp32) on a small padded batch."""
    bk.eval(), hf.eval()
    ids = torch.randint(999, bk.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    a, b = bk(**inputs), hf(**inputs)
    if kind == "pretraining":
        pairs = [(a.prediction_logits[mask.bool()], b.prediction_logits[mask.bool()])]
    elif kind == "model":
        pairs = [(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()]), (a.pooler_output, b.pooler_output)]
    else:
        pairs = [(a.logits, b.logits)]
    for x, y in pairs:
        torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4)
