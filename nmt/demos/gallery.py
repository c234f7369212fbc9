"""The demos by name, what each shows, and what running one gives back."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nmt.report.panels import Curves, Heatmap


@dataclass(frozen=True)
class DemoOptions:
    """Every demo's settings; each reads those it needs (``checkpoint``, None: the newest run
    in checkpoints/, ``text`` and ``device``: the trained run's demo; ``epochs`` and ``lr``:
    the parametric pooling's training, which reports its epochs done out of all to
    ``progress``)."""

    seed: int = 0
    epochs: int = 5
    lr: float = 0.5
    checkpoint: Path | None = None
    text: str = "I am cold because the window is open."
    device: str = "auto"
    progress: Callable[[int, int], None] = lambda done, total: None


@dataclass(frozen=True)
class Outcome:
    """A demo's result: ``lines`` to print (the numbers a reader should notice), and the
    figure: ``panels`` under ``title``, ``columns`` a row."""

    lines: list[str]
    panels: list[Curves | Heatmap]
    title: str
    columns: int = 3


@dataclass(frozen=True)
class Demo:
    name: str
    summary: str
    run: Callable[[DemoOptions], Outcome]
    needs_run: bool = False  # shows a trained run


def demos() -> dict[str, Demo]:
    """Every demo, in the chapter's order."""
    from nmt.demos import bahdanau, multihead, pooling, positions, scoring
    found = [
        Demo("pooling", "Nadaraya-Watson attention pooling: average, Gaussian-kernel and learned-width "
                        "kernel regression, their fits, weights and test MSE", pooling.run),
        Demo("scoring", "masked softmax, additive and scaled dot-product attention on the chapter's toy "
                        "tensors, with the classes the models use", scoring.run),
        Demo("bahdanau", "a trained run's attention on a sentence beside the decoder state's norm at each "
                         "step (a trained run; attn-plot shows more)", bahdanau.run, needs_run=True),
        Demo("multihead", "multi-head attention: the chapter's shape check and what each head attends to",
             multihead.run),
        Demo("positions", "sinusoidal positional encoding: columns over position, the whole table beside "
                          "binary counting, and an offset as a rotation", positions.run),
    ]
    return {demo.name: demo for demo in found}
