"""Figures made of panels, for ``nmt demo``: curves over an axis, and heatmaps with a colour bar.

A demo describes what to draw (:class:`Curves`, :class:`Heatmap`); :func:`plot_panels` draws
it, so the experiments themselves never touch matplotlib.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.report.plotting import figure_format, label_ticks, pyplot, save_figure


@dataclass(frozen=True)
class Series:
    """One curve: ``style`` a matplotlib format ("-", "o", "--"...)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: str = "-"


@dataclass(frozen=True)
class Curves:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]


@dataclass(frozen=True)
class Heatmap:
    """``values`` (rows, columns) drawn row by row from the top; ticks label every row or
    column when given (None: numbered from 0); the colour bar says what a value is."""

    title: str
    values: torch.Tensor
    xlabel: str
    ylabel: str
    colorbar: str
    xticks: list[str] | None = None
    yticks: list[str] | None = None
    limits: tuple[float, float] | None = None  # None: the values' own range
    cmap: str = "viridis"


def plot_panels(panels: list[Curves | Heatmap], path: Path, title: str, columns: int = 3,
                panel_inches: tuple[float, float] = (4.6, 3.6)) -> None:
    """Draw ``panels`` in a grid of ``columns``, under ``title``, into ``path`` (.png, .svg or .pdf)."""
    fmt = figure_format(path)
    plt = pyplot()
    cols = min(columns, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * panel_inches[0], rows * panel_inches[1] + 0.6),
                             squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, panel in zip(axes.flat, panels):
        (_curves if isinstance(panel, Curves) else _heatmap)(fig, ax, panel)
        ax.set_title(panel.title, fontsize=10)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    save_figure(fig, path, fmt)


def _curves(fig, ax, panel: Curves) -> None:
    for s in panel.series:
        ax.plot(list(s.x), list(s.y), s.style, label=s.label, markersize=3)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    if any(s.label for s in panel.series):
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _heatmap(fig, ax, panel: Heatmap) -> None:
    low, high = panel.limits or (None, None)
    image = ax.imshow(panel.values.float().numpy(), cmap=panel.cmap, vmin=low, vmax=high, aspect="auto",
                      interpolation="nearest")
    rows, cols = panel.values.shape
    if panel.xticks is not None:
        label_ticks(ax.set_xticks, panel.xticks, rotation=60, ha="right")
    else:
        ax.set_xticks(_numbered(cols), [str(i) for i in _numbered(cols)])
    if panel.yticks is not None:
        label_ticks(ax.set_yticks, panel.yticks)
    else:
        ax.set_yticks(_numbered(rows), [str(i) for i in _numbered(rows)])
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).set_label(panel.colorbar, fontsize=8)


def _numbered(n: int) -> list[int]:
    """Tick positions: every one up to 12, then about 8 evenly spaced."""
    step = 1 if n <= 12 else -(-n // 8)
    return list(range(0, n, step))
