"""`bertkit fill-mask`: what a pre-trained BERT guesses for [MASK], the task it was pre-trained on.

    bertkit fill-mask --model runs/demo-en/pretrain/model "she [MASK] to the door ."
    bertkit.pipeline("runs/demo-en/pretrain/model", task="fill-mask")(["she [MASK] to the door ."])

For each input: the `top_k` most probable vocabulary tokens at its first [MASK], as
`{"token": id, "token_str": ..., "score": probability, "sequence": the text with it in place}`, or, with
several masks, one such list per mask (each mask predicted with the others left masked, as transformers'
fill-mask pipeline does). The probabilities are the softmax of the MLM head's logits over the whole
vocabulary: the same tokens, in the same order, as transformers' pipeline on the same folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BertkitError
from .tokenizer import Tokenizer


class FillMask:
    """A pre-trained model with its masked-LM head: texts with [MASK] in, the likeliest tokens out."""

    def __init__(self, model_dir: str | Path, top_k: int = 5, device: str = "auto", batch_size: int = 32):
        import torch

        from .heads import BertForPreTraining
        from .hf import weight_names

        if top_k < 1:
            raise BertkitError(f"--top-k must be positive, got {top_k}")
        if not any(name.startswith(("cls.predictions.", "mlm.")) for name in weight_names(model_dir)):
            raise BertkitError(f"{model_dir}: the model has no masked-LM head (cls.predictions.*), so nothing to fill "
                               "[MASK] with: give a pre-trained model (bertkit pretrain's RUN/model)")
        self.tokenizer = Tokenizer.from_pretrained(model_dir)
        self.model = BertForPreTraining.from_pretrained(model_dir)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model.to(torch.device(device)).eval()
        self.top_k, self.batch_size = top_k, batch_size

    def __call__(self, texts: str | Sequence[str], top_k: int | None = None) -> list[Any]:
        """Gives, per text, the top-k tokens at its [MASK] (a list of lists where it has several); for one text
        given as a string, its result alone."""
        import torch

        if isinstance(texts, str):
            return self([texts], top_k)[0]
        texts = list(texts)
        k = top_k or self.top_k
        tok, model = self.tokenizer, self.model
        limit = model.config.max_position_embeddings
        out: list[Any] = []
        for lo in range(0, len(texts), self.batch_size):
            chunk = texts[lo : lo + self.batch_size]
            enc = tok(chunk, padding=True, truncation=True, max_length=limit, return_tensors="pt")
            ids = enc["input_ids"]
            where = ids == tok.mask_token_id  # (B, T)
            for i, text in enumerate(chunk):
                if not bool(where[i].any()):
                    raise BertkitError(f"input {lo + i + 1} has no [MASK] to fill: {text!r}")
            with torch.inference_mode():
                batch = {key: v.to(next(model.parameters()).device) for key, v in enc.items()}
                hidden = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
                logits = model.mlm(hidden[where.to(hidden.device)], model.bert.embeddings.word_embeddings.weight)  # (M, V)
                probs = logits.float().softmax(-1).cpu().numpy()
            rows, positions = where.nonzero(as_tuple=True)
            per_text: dict[int, list[list[dict[str, Any]]]] = {}
            for m, (row, pos) in enumerate(zip(rows.tolist(), positions.tolist(), strict=True)):
                per_text.setdefault(row, []).append(self._top(ids[row].tolist(), pos, probs[m], k))
            out += [found[0] if len(found) == 1 else found for _, found in sorted(per_text.items())]
        return out

    def _top(self, ids: list[int], position: int, probs: np.ndarray, k: int) -> list[dict[str, Any]]:
        best = np.argsort(-probs, kind="stable")[:k]
        tok = self.tokenizer
        found = []
        for token in best.tolist():
            filled = [*ids[:position], token, *ids[position + 1 :]]
            found.append({"token": token, "token_str": tok.convert_ids_to_tokens(token), "score": float(probs[token]),
                          "sequence": tok.decode([i for i in filled if i != tok.pad_token_id and i not in
                                                  (tok.cls_token_id, tok.sep_token_id)], skip_special_tokens=False)})
        return found
