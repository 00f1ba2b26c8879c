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

from ..errors import BertkitError
from ..fileio import atomic_write
from ..model import BertModel
from ..text import has_cjk
from ..tokenizer import Tokenizer

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
    log.warning("no font with Chinese characters is installed (Debian: apt install fonts-wqy-microhei; ./dev setup "
                "installs it as root): Chinese tokens show as boxes")
    return None


CAPTION = ("Each map: a row is a token asking (the query), the columns the tokens it attends to (the keys); brighter "
           "is more attention, each row summing to 1. A diagonal one step off the middle is a head reading the next "
           "or previous token; a bright [CLS] or [SEP] column is a head with nothing to look for in this input.")


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
    size = 7.5 if one else max(2.2, min(3.2, 16 / max(rows, cols)))
    strip = 2.6 if T <= 16 else 3.4  # the input representation: taller when its labels stand upright
    figure = plt.figure(figsize=(max(size * cols + 1.2, 11), strip + 0.9 + size * rows), constrained_layout=True)
    grid = figure.add_gridspec(rows + 2, cols + 1, height_ratios=[strip / size, *[1] * rows, 0.9 / size],
                               width_ratios=[*[1] * cols, 0.2 / size])  # a colour bar a fifth of an inch wide
    _input_representation(figure.add_subplot(grid[0, :cols]), tokens, segments)
    every = 1 if one or T <= 20 else max(1, round(T / 20))  # at most about 20 labels an axis in the small maps
    labels = [t if i % every == 0 else "" for i, t in enumerate(tokens)]
    tick = 9 if one else (7 if T <= 20 else 6)
    image = None
    top = float(max(0.1, (maps if not one else maps[layer, head]).max()))  # long inputs spread attention thin
    for r in range(rows):
        for c in range(cols):
            ax = figure.add_subplot(grid[r + 1, c])
            l_, h_ = (layer, head) if one else (r, c)
            image = ax.imshow(maps[l_, h_], cmap="viridis", vmin=0, vmax=top, interpolation="nearest")
            ax.set_title(f"layer {l_}, head {h_}", fontsize=11 if one else 9)
            ax.set_yticks(range(T), labels if (one or c == 0) else [""] * T, fontsize=tick)
            ax.set_xticks(range(T), labels if (one or r == rows - 1) else [""] * T, rotation=90, fontsize=tick)
            ax.tick_params(length=0)
            if one or c == 0:
                ax.set_ylabel("query (the token attending)", fontsize=8)
            if one or r == rows - 1:
                ax.set_xlabel("key (the token attended to)", fontsize=8)
    bar = figure.colorbar(image, cax=figure.add_subplot(grid[1 : rows + 1, cols]))
    bar.set_label("attention probability", fontsize=8)
    caption = figure.add_subplot(grid[rows + 1, :])
    caption.axis("off")
    caption.text(0, 0.5, CAPTION, ha="left", va="center", fontsize=9, wrap=True)
    return figure


def _input_representation(ax: Any, tokens: list[str], segments: list[int]) -> None:
    """The paper's Figure 2: input tokens, then token + segment + position embeddings, which sum to the input. With
    many tokens the labels stand upright, so that each stays over its own box."""
    n = len(tokens)
    width = ax.figure.get_figwidth()
    upright = n > 16
    # about 1.6 inches for the row names, however many tokens
    margin = max(2.4, 1.6 * n / max(width - 1.6, 1.0))
    ax.set_xlim(-margin, n)
    ax.set_ylim(-0.2, 4.2 if not upright else 6.6)
    ax.axis("off")
    rows = [("Input", tokens, "#ffffff"), ("Token embeddings", [f"E[{t}]" for t in tokens], "#f6e3b4"),
            ("Segment embeddings", [f"E{'AB'[s]}" for s in segments], "#cde8c6"),
            ("Position embeddings", [f"E{i}" for i in range(n)], "#d9d2ee")]
    step = 1.0 if not upright else 1.6
    for k, (name, cells, color) in enumerate(rows):
        y = (3.6 if not upright else 5.8) - k * step
        ax.text(-margin + 0.05, y, name, ha="left", va="center", fontsize=8, fontweight="bold")
        for i, cell in enumerate(cells):
            ax.add_patch(_box(i, y, color, tall=upright))
            ax.text(i + 0.45, y, cell, ha="center", va="center", rotation=90 if upright else 0, clip_on=True,
                    fontsize=6 if upright or len(cell) > 8 else 7)
        if k > 1:
            ax.text(-0.3, y + step / 2, "+", ha="center", va="center", fontsize=11)
    ax.set_title("input representation: the sum of the three embeddings of each token (Devlin et al., Figure 2)",
                 fontsize=9)


def _box(x: float, y: float, color: str, tall: bool = False) -> Any:
    from matplotlib.patches import FancyBboxPatch

    h = 1.3 if tall else 0.64
    return FancyBboxPatch((x, y - h / 2), 0.9, h, boxstyle="round,pad=0.02", facecolor=color, edgecolor="#777777",
                          linewidth=0.6)
