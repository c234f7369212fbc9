"""What every demo takes and gives back: its options and its outcome (the gallery and each
demo import these; the gallery alone imports the demos)."""
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
