"""Figures: attention heatmaps and training curves. matplotlib is imported here only, through
:func:`pyplot` (the demos' panels, :mod:`nmt.report.panels`, draw through it too)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from nmt.errors import NmtError
from nmt.runtime.fileio import atomic_path

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


@dataclass
class AttentionPanel:
    """One heatmap: weights shape (queries, keys), a row per query piece, a column per key piece."""

    weights: torch.Tensor
    keys: list[str]
    queries: list[str]
    title: str
    key_label: str = "source pieces"
    query_label: str = "generated pieces"


def pyplot():
    import matplotlib
    matplotlib.use("Agg")  # headless: no display needed
    import matplotlib.pyplot as plt
    return plt


def figure_format(path: Path) -> str:
    """The figure format named by ``path``'s extension, or a clear error."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise NmtError(f"{path}: unknown figure format '{path.suffix}'; use .png, .svg or .pdf")
    return fmt


MAX_PANELS = 12  # heatmaps in one figure
GRID_COLUMNS = 3
MAX_COLUMNS = 4  # one row of a 4-head layer
PANEL_INCHES = (3.0, 8.0)  # each panel's smallest and largest side
MAX_TICKS = 60  # labelled pieces per axis; longer axes label every k-th piece


def check_panels(sentences: int, per_sentence: int = 1) -> None:
    """Refuse more heatmaps than one figure holds (before decoding, where the count is known)."""
    if sentences * per_sentence > MAX_PANELS:
        if per_sentence == 1:
            raise NmtError(f"attn-plot draws at most {MAX_PANELS} sentences in one figure, got "
                           f"{sentences}; plot them in groups of {MAX_PANELS} or fewer")
        raise NmtError(f"attn-plot draws at most {MAX_PANELS} heatmaps in one figure: {sentences} "
                       f"sentences x {per_sentence} heads is {sentences * per_sentence}; give at most "
                       f"{MAX_PANELS // per_sentence} sentences with --head all")


def plot_attention(panels: list[AttentionPanel], path: Path, columns: int = GRID_COLUMNS) -> None:
    """Draw one heatmap per panel (keys on x, queries on y, colour bar), in a grid of up to
    ``columns`` (at most 4) columns. Panel sides are capped, so no input makes a figure larger
    than 32 x 32 inches (4,800 x 4,800 pixels at 150 dpi)."""
    fmt = figure_format(path)
    check_panels(len(panels))
    plt = pyplot()
    cols = min(columns, MAX_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    width = max(_side(len(p.keys), 0.4) for p in panels)
    height = max(_side(len(p.queries), 0.35) for p in panels)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * width, rows * height), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, panel in zip(axes.flat, panels):
        image = ax.imshow(panel.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        label_ticks(ax.set_xticks, panel.keys, rotation=60, ha="right")
        label_ticks(ax.set_yticks, panel.queries)
        ax.set_xlabel(panel.key_label)
        ax.set_ylabel(panel.query_label)
        ax.set_title(_short(panel.title), fontsize=9, wrap=True)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    save_figure(fig, path, fmt, keep_links=True)


def _side(pieces: int, inches_per_piece: float) -> float:
    """A panel side for ``pieces`` pieces along it, within PANEL_INCHES."""
    low, high = PANEL_INCHES
    return min(high, max(low, inches_per_piece * pieces + 1.5))


def label_ticks(set_ticks: Callable[..., Any], labels: list[str], **style: Any) -> None:
    """Label every piece, or every k-th one on a long axis, so labels never overlap."""
    k = -(-len(labels) // MAX_TICKS)
    positions = range(0, len(labels), k)
    set_ticks(positions, [labels[i] for i in positions], fontsize=8 if len(labels) < 30 else 6, **style)


def _short(title: str, limit: int = 160) -> str:
    """Each line of a panel's title cut to ``limit`` characters."""
    return "\n".join(line if len(line) <= limit else line[:limit - 1] + "…" for line in title.split("\n"))


def plot_training_curve(records: list[dict], path: Path) -> None:
    """Training loss and validation BLEU over steps, two y-axes."""
    plt = pyplot()
    fig, loss_ax = plt.subplots(figsize=(7, 4))
    steps = [r["step"] for r in records]
    loss_ax.plot(steps, [r.get("train_loss") for r in records], "o-", color="tab:blue", label="train loss")
    loss_ax.plot(steps, [r["valid_loss"] for r in records], "s-", color="tab:cyan", label="valid loss")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss per target piece")
    bleu_ax = loss_ax.twinx()
    bleu_ax.plot(steps, [r["valid_bleu"] for r in records], "^-", color="tab:red", label="valid BLEU")
    bleu_ax.set_ylabel("validation BLEU")
    fig.legend(loc="upper center", ncol=3, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, figure_format(path))


def save_figure(fig: Any, path: Path, fmt: str, keep_links: bool = False) -> None:
    plt = pyplot()
    try:
        with atomic_path(path, keep_links) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150)
    except OSError as e:
        raise NmtError(f"{path}: cannot write figure ({e.strerror})") from None
    finally:
        plt.close(fig)
