"""`bertkit attention`: where BERT's heads look, and what its input is made of, drawn for one text (the maps
themselves are `BertModel.attention_maps`).

    bertkit attention --model runs/demo-en/pretrain/model "my dog is cute" --pair "he likes playing" --out att.png
    bertkit attention --model DIR "my dog is cute" --out head.png --layer 1 --head 0

The picture has the input representation on top, as the paper's Figure 2 draws it (each token's
embedding, plus its segment's, plus its position's), and below it the attention of every head of every
layer (rows: layers, columns: heads; in each map a row is a query token, a column the token it attends
to), or one head large with `--layer` and `--head` (numbered from 0). The maps are the softmax of each
head's scaled query-key products over the real tokens: transformers' `output_attentions` for the same
weights.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BertkitError
from .fileio import atomic_write
from .model import BertModel
from .text import has_cjk
from .tokenizer import Tokenizer

log = logging.getLogger("bertkit")


def plot_attention(model_dir: str | Path, text: str, pair: str | None, out: str | Path, layer: int | None = None,
                   head: int | None = None) -> Path:
    """Draws the input representation and the attention maps of `text` (and `pair`) to the PNG `out`."""
    if (layer is None) != (head is None):
        raise BertkitError("give --layer and --head together (one head, drawn large), or neither (every head)")
    model = BertModel.from_pretrained(model_dir).eval()
    cfg = model.config
    if layer is not None and not 0 <= layer < cfg.num_hidden_layers:
        raise BertkitError(f"--layer {layer}: the model has layers 0 to {cfg.num_hidden_layers - 1}")
    if head is not None and not 0 <= head < cfg.num_attention_heads:
        raise BertkitError(f"--head {head}: the model has heads 0 to {cfg.num_attention_heads - 1}")
    tok = Tokenizer.from_pretrained(model_dir)
    enc = tok([text], [pair] if pair is not None else None, truncation=True, max_length=min(cfg.max_position_embeddings, 64),
              return_tensors="pt")
    maps = model.attention_maps(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])[:, 0].numpy()  # (L, nh, T, T)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    segments = enc["token_type_ids"][0].tolist()
    path = Path(out)
    with warnings.catch_warnings():  # one line says a Chinese font is missing (_font), not one per character
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        figure = _draw(maps, tokens, segments, layer, head, _font(tokens))
        atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=110, format="png"))
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path


def _font(tokens: list[str]) -> str | None:
    """Gives a font that has CJK glyphs when the tokens need one and the machine has one."""
    if not has_cjk(tokens):
        return None
    from matplotlib import font_manager

    for font in font_manager.fontManager.ttflist:
        if any(name in font.name for name in ("CJK", "WenQuanYi", "Hei", "Ming", "Song", "Kai", "Droid Sans Fallback")):
            return font.name
    log.warning("no font with Chinese characters is installed (Debian: fonts-noto-cjk): Chinese tokens show as boxes")
    return None


def _draw(maps: np.ndarray, tokens: list[str], segments: list[int], layer: int | None, head: int | None,
          font: str | None) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if font:
        plt.rcParams["font.family"] = [font, "DejaVu Sans"]
    L, nh, T, _ = maps.shape
    one = layer is not None
    rows, cols = (1, 1) if one else (L, nh)
    size = 7.5 if one else max(1.7, min(3.0, 16 / max(rows, cols)))
    figure = plt.figure(figsize=(max(size * cols, 10), 2.3 + size * rows), constrained_layout=True)
    grid = figure.add_gridspec(rows + 1, cols, height_ratios=[2.3 / size * 1.0, *[1] * rows])
    _input_representation(figure.add_subplot(grid[0, :]), tokens, segments)
    labels = tokens if one or T <= 24 else [t if i % max(1, T // 24) == 0 else "" for i, t in enumerate(tokens)]
    for r in range(rows):
        for c in range(cols):
            ax = figure.add_subplot(grid[r + 1, c])
            l_, h_ = (layer, head) if one else (r, c)
            ax.imshow(maps[l_, h_], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(f"layer {l_}, head {h_}", fontsize=11 if one else 8)
            ax.set_yticks(range(T), labels if (one or c == 0) else [""] * T, fontsize=9 if one else 5)
            ax.set_xticks(range(T), labels if (one or r == rows - 1) else [""] * T, rotation=90, fontsize=9 if one else 5)
            ax.tick_params(length=0)
    return figure


def _input_representation(ax: Any, tokens: list[str], segments: list[int]) -> None:
    """The paper's Figure 2: input tokens, then token + segment + position embeddings, which sum to the input."""
    n = len(tokens)
    width = ax.figure.get_figwidth()
    margin = max(2.2, 1.5 * n / max(width - 1.5, 1.0))  # about 1.5 inches for the row names, however many tokens
    ax.set_xlim(-margin, n)
    ax.set_ylim(-0.2, 4.2)
    ax.axis("off")
    rows = [("Input", tokens, "#ffffff"), ("Token embeddings", [f"E[{t}]" for t in tokens], "#f6e3b4"),
            ("Segment embeddings", [f"E{'AB'[s]}" for s in segments], "#cde8c6"),
            ("Position embeddings", [f"E{i}" for i in range(n)], "#d9d2ee")]
    for k, (name, cells, color) in enumerate(rows):
        y = 3.6 - k
        ax.text(-margin + 0.05, y, name, ha="left", va="center", fontsize=8, fontweight="bold")
        for i, cell in enumerate(cells):
            ax.add_patch(_box(i, y, color))
            ax.text(i + 0.45, y, cell, ha="center", va="center", fontsize=6 if len(cell) > 8 else 7, clip_on=True)
        if k > 1:
            ax.text(-0.3, y + 0.5, "+", ha="center", va="center", fontsize=11)
    ax.set_title("input representation: the sum of the three embeddings of each token (Devlin et al., Figure 2)",
                 fontsize=9)


def _box(x: float, y: float, color: str) -> Any:
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x, y - 0.32), 0.9, 0.64, boxstyle="round,pad=0.02", facecolor=color, edgecolor="#777777",
                          linewidth=0.6)
