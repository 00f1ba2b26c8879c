"""tests/pictures.py, the PNG checker the picture tests use, on figures drawn here: it counts the panels of
each layout, tells a panel that shows data from one that is blank, and its checks fail on a picture with
other panels, a blank panel, or no input representation above attention maps."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pytest
from pictures import check, check_attention, ink, panels, read, rows

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def draw(path: Path, shape: tuple[int, int], empty: tuple[int, ...] = (), off: tuple[int, ...] = (),
         image: tuple[int, ...] = ()) -> Path:
    """Saves a grid of panels as bertkit's pictures are saved (110 dpi): a line and markers in each, none in the
    `empty` ones (a grid, a title and labels only), a colour-mapped image in the `image` ones, and the `off` ones
    turned off."""
    fig, axes = plt.subplots(*shape, figsize=(3.6 * shape[1], 3.2 * shape[0]), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k in image:
            ax.imshow(np.random.default_rng(k).random((12, 12)), cmap="viridis")
        elif k not in empty:
            ax.plot([1, 2, 3], [3, 1, 2], "o-", label="train")
            ax.legend(fontsize=8)
        ax.set_title(f"panel {k}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if k in off:
            ax.axis("off")
    fig.suptitle("a figure")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


@pytest.mark.parametrize("shape", [(1, 4), (2, 3)])
def test_every_panel_of_a_grid_is_found(tmp_path: Path, shape: tuple[int, int]) -> None:
    found = panels(read(draw(tmp_path / "grid.png", shape)))
    assert [len(row) for row in rows(found)] == [shape[1]] * shape[0]
    assert not any(p.blank for p in found)
    assert all(p.bottom - p.top > 100 and p.right - p.left > 100 for p in found)


def test_a_panel_turned_off_is_no_panel_and_check_wants_the_layout(tmp_path: Path) -> None:
    # as `bertkit plot` leaves the last cell of its two-column grid when the panel count is odd
    five = draw(tmp_path / "five.png", (3, 2), off=(5,))
    assert [len(row) for row in rows(panels(read(five)))] == [2, 2, 1] and len(check(five, [2, 2, 1])) == 5
    for layout in ([2, 2], [2, 2, 2], [1, 2, 2], [5]):
        with pytest.raises(AssertionError, match=r"panels in rows of \[2, 2, 1\]"):
            check(five, layout)


def test_blank_panels_and_blank_pictures(tmp_path: Path) -> None:
    found = panels(read(draw(tmp_path / "some.png", (2, 2), empty=(1, 2))))
    assert [p.blank for p in found] == [False, True, True, False]
    assert all(p.data == 0 for p in found if p.blank)  # grid lines, titles and frames are no data
    with pytest.raises(AssertionError, match=r"blank panels \[1, 2\]"):
        check(tmp_path / "some.png", [2, 2])
    assert all(p.blank for p in panels(read(draw(tmp_path / "none.png", (1, 3), empty=(0, 1, 2)))))
    white = tmp_path / "white.png"
    plt.imsave(white, np.ones((300, 400, 3)))
    assert panels(read(white)) == [] and ink(read(white)) == 0.0


def test_an_image_panel_shows_data_and_ink_finds_what_is_drawn(tmp_path: Path) -> None:
    image = read(draw(tmp_path / "maps.png", (1, 2), image=(0, 1)))
    found = panels(image)
    assert len(found) == 2 and all(p.data > 0.9 * (p.bottom - p.top - 3) * (p.right - p.left - 3) for p in found)
    assert ink(image, found[0].top + 5, found[0].bottom - 5) > 0.5  # the maps fill the panels' rows
    assert ink(image, found[0].bottom + 40) < 0.05  # below them: tick labels only


def maps(path: Path, layers: int, heads: int, strip: bool) -> Path:
    """Saves attention-like maps, a row of `heads` per layer, under a band of boxes and labels (`strip`) or not."""
    fig = plt.figure(figsize=(max(2.2 * heads, 6), 1.5 + 2.2 * layers), constrained_layout=True)
    grid = fig.add_gridspec(layers + 1, heads, height_ratios=[0.7, *[1] * layers])
    top = fig.add_subplot(grid[0, :])
    top.axis("off")
    if strip:
        top.set_xlim(0, 6)
        for i in range(6):
            top.add_patch(plt.Rectangle((i + 0.05, 0.2), 0.9, 0.6, facecolor="#cde8c6", edgecolor="#777777"))
            top.text(i + 0.5, 0.5, f"E{i}", ha="center", va="center")
    rng = np.random.default_rng(0)
    for r in range(layers):
        for c in range(heads):
            ax = fig.add_subplot(grid[r + 1, c])
            ax.imshow(rng.random((8, 8)), cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"layer {r}, head {c}", fontsize=8)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def test_check_attention_wants_the_maps_under_the_input_representation(tmp_path: Path) -> None:
    check_attention(maps(tmp_path / "all.png", 2, 3, strip=True), 2, 3)
    check_attention(maps(tmp_path / "one.png", 1, 1, strip=True), 1, 1)
    with pytest.raises(AssertionError, match="panels in rows of"):
        check_attention(tmp_path / "all.png", 3, 2)
    with pytest.raises(AssertionError, match="where the input representation goes"):
        check_attention(maps(tmp_path / "bare.png", 2, 3, strip=False), 2, 3)
