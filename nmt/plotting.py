"""Figures: attention heatmaps and training curves. The only module that imports matplotlib."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.errors import NmtError
from nmt.fileio import atomic_path

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


@dataclass
class AttentionPanel:
    """One sentence's attention: weights shape (target pieces, source pieces)."""

    weights: torch.Tensor
    src_tokens: list[str]
    tgt_tokens: list[str]
    title: str


def _pyplot():
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


def plot_attention(panels: list[AttentionPanel], path: Path) -> None:
    """Draw one heatmap per panel (source on x, target on y, colour bar) into one figure."""
    fmt = figure_format(path)
    plt = _pyplot()
    widths = [max(3.0, 0.4 * len(p.src_tokens) + 1.5) for p in panels]
    height = max(3.0, 0.35 * max(len(p.tgt_tokens) for p in panels) + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(widths), height), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, panel in zip(axes[0], panels):
        image = ax.imshow(panel.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(panel.src_tokens)), panel.src_tokens, rotation=60, ha="right",
                      fontsize=8 if len(panel.src_tokens) < 30 else 6)
        ax.set_yticks(range(len(panel.tgt_tokens)), panel.tgt_tokens,
                      fontsize=8 if len(panel.tgt_tokens) < 30 else 6)
        ax.set_xlabel("source pieces")
        ax.set_ylabel("generated pieces")
        ax.set_title(panel.title, fontsize=9, wrap=True)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    _save(fig, path, fmt)


def plot_training_curve(records: list[dict], path: Path) -> None:
    """Training loss and validation BLEU over steps, two y-axes."""
    plt = _pyplot()
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
    _save(fig, path, figure_format(path))


def _save(fig, path: Path, fmt: str) -> None:
    plt = _pyplot()
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150)
    except OSError as e:
        raise NmtError(f"{path}: cannot write figure ({e.strerror})") from None
    finally:
        plt.close(fig)
