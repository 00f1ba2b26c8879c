"""Checks a PNG by what it shows rather than by its size: its panels, found by their frames, and whether
each panel's plot area holds data.

A panel is a matplotlib axes with its frame drawn: four black, one-pixel spines (an axes turned off has
none, so it is no panel). Data is coloured pixels: matplotlib's colour cycle and colour maps are
saturated, while what an empty axes holds (its frame, grid lines, text) is grey, so a panel whose
lines, markers or image are missing has no coloured pixel.

    found = panels(read(path))
    assert [len(row) for row in rows(found)] == [2, 2, 1] and not any(p.blank for p in found)

or, with the layouts bertkit draws: check(path, run_layout(log)), check_attention(path, layers, heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

BLACK = 0.35  # a frame pixel's channels all lie below this (spines are black; antialiased text edges are lighter)
GREY = 0.15  # ... and within this of each other (the darkest colours of a map, viridis' purple, are not grey)
MIN_SIDE = 40  # pixels: shorter dark runs are text strokes, tick marks or legend handles, not frames
REACH = 12  # pixels: how far a tick mark at a corner can lengthen a spine's run (3.5 points at 110 dpi is 5)
COVERED = 0.95  # the share of a side that must be frame pixels (data drawn over a spine hides a few)
DATA = 0.2  # a data pixel's channels spread at least this far: coloured, not grey
MIN_DATA = 20  # coloured pixels a panel needs to count as showing something (one marker is about 30)
TITLE_ROOM = 40  # pixels above a row of maps that their titles may take


@dataclass(frozen=True)
class Panel:
    """A framed plot area: the pixel rows of its top and bottom spines, the columns of its left and right ones,
    and the coloured pixels inside."""

    top: int
    left: int
    bottom: int
    right: int
    data: int

    @property
    def blank(self) -> bool:
        return self.data < MIN_DATA


def read(path: str | Path) -> np.ndarray:
    """Gives a PNG's pixels as (H, W, 3) floats in [0, 1], transparency flattened onto white."""
    import matplotlib.image

    image = np.asarray(matplotlib.image.imread(Path(path)), dtype=np.float32)
    if image.ndim == 2:  # greyscale
        image = np.repeat(image[..., None], 3, axis=2)
    if image.shape[2] == 4 and (image[..., 3] < 1).any():  # matplotlib's own are opaque: no work there
        alpha = image[..., 3:]
        image = image[..., :3] * alpha + (1 - alpha)
    return image[..., :3]


def _runs(line: np.ndarray) -> list[tuple[int, int]]:
    """Gives the [start, end) of each run of True in a 1-D boolean array."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], line.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def panels(image: np.ndarray) -> list[Panel]:
    """Gives the image's framed panels, top to bottom and left to right within a row."""
    r, g, b = image[..., 0], image[..., 1], image[..., 2]  # channel by channel: faster than reducing axis 2
    high = np.maximum(np.maximum(r, g), b)  # (H, W)
    spread = high - np.minimum(np.minimum(r, g), b)
    frame, coloured = (high < BLACK) & (spread < GREY), spread >= DATA
    found: list[Panel] = []
    for y in range(frame.shape[0] - MIN_SIDE):
        for x0, x1 in _runs(frame[y]):
            if x1 - x0 < MIN_SIDE:
                continue
            box = _box(frame, y, x0, x1)
            if box is None or any(_same(p, *box) for p in found):  # a 2-pixel spine gives its box twice
                continue
            top, left, bottom, right = box
            found.append(Panel(*box, int(coloured[top + 2 : bottom - 1, left + 2 : right - 1].sum())))
    return sorted(found, key=lambda p: (p.top, p.left))


def _box(frame: np.ndarray, y: int, x0: int, x1: int) -> tuple[int, int, int, int] | None:
    """Gives (top, left, bottom, right) of the frame whose top spine is the run [x0, x1) of row y, or None.

    A tick mark at a corner lengthens a spine's run by a few pixels (a y tick at the top leftwards, an x tick
    at the left downwards), so the sides are the outermost columns within REACH of the run's ends that go
    down as lines, and the bottom is the first row below that joins them."""

    def side(x: int) -> bool:
        return frame[y : y + MIN_SIDE, x].mean() >= COVERED

    lefts = [x for x in range(x0, min(x0 + REACH, x1)) if side(x)]
    rights = [x for x in range(x1 - 1, max(x1 - 1 - REACH, x0), -1) if side(x)]
    if not lefts or not rights or rights[0] - lefts[0] < MIN_SIDE:
        return None
    left, right = lefts[0], rights[0]
    below = frame[y + MIN_SIDE :, left : right + 1].mean(axis=1) >= COVERED
    for bottom in (y + MIN_SIDE + np.flatnonzero(below)).tolist():
        if min(frame[y : bottom + 1, left].mean(), frame[y : bottom + 1, right].mean()) >= COVERED:
            return y, left, bottom, right
    return None


def _same(p: Panel, top: int, left: int, bottom: int, right: int, tolerance: int = 3) -> bool:
    return max(abs(p.top - top), abs(p.left - left), abs(p.bottom - bottom), abs(p.right - right)) <= tolerance


def rows(found: list[Panel], tolerance: int = 5) -> list[list[Panel]]:
    """Gives the panels grouped into rows (tops within `tolerance` pixels), each row left to right."""
    out: list[list[Panel]] = []
    for p in sorted(found, key=lambda p: (p.top, p.left)):
        if out and abs(out[-1][0].top - p.top) <= tolerance:
            out[-1].append(p)
        else:
            out.append([p])
    return [sorted(row, key=lambda p: p.left) for row in out]


def ink(image: np.ndarray, top: int = 0, bottom: int | None = None) -> float:
    """Gives the share of the pixels in rows [top, bottom) that are not white: drawn on, in any colour."""
    band = image[top:bottom]
    return float((np.minimum(np.minimum(band[..., 0], band[..., 1]), band[..., 2]) < 0.9).mean())


def check(path: str | Path, layout: list[int]) -> list[Panel]:
    """Asserts that the PNG's panels stand in rows of these lengths, top to bottom, and that none is blank;
    gives the panels."""
    return _check(read(path), path, layout)


def _check(image: np.ndarray, path: str | Path, layout: list[int]) -> list[Panel]:
    found = panels(image)
    shown = [len(row) for row in rows(found)]
    assert shown == layout, f"{path}: panels in rows of {shown}, expected {layout}"
    assert not any(p.blank for p in found), f"{path}: blank panels {[k for k, p in enumerate(found) if p.blank]}"
    return found


def check_attention(path: str | Path, layers: int, heads: int) -> None:
    """Asserts that an attention picture (`bertkit attention`) shows the input representation across the top
    (the paper's Figure 2: rows of boxes and labels) above a map per head, a row of `heads` maps per layer."""
    image = read(path)
    found = _check(image, path, [heads] * layers)
    drawn = ink(image, 0, found[0].top - TITLE_ROOM)
    assert drawn > 0.1, f"{path}: {100 * drawn:.1f}% drawn above the maps, where the input representation goes"


def run_layout(log: str | Path) -> list[int]:
    """Gives the rows of panels `bertkit plot` draws for a run's log.jsonl: one panel per metric group the log
    holds (bertkit.demo.plots.PANELS), two to a row."""
    from bertkit.demo.plots import PANELS
    from bertkit.runlog import read_log

    keys = {k for row in read_log(Path(log)) for k in row}
    n = sum(any(k in keys for k, _ in series) for _, series in PANELS)
    return [2] * (n // 2) + [1] * (n % 2)
