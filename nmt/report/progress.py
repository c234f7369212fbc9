"""The rich progress display of training: step, loss, throughput and ETA."""
from __future__ import annotations

import math
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class TrainProgress:
    """Shows steps done, smoothed loss, target tokens/s and the time left under the budget."""

    def __init__(self, total_steps: int | None, max_minutes: float | None) -> None:
        self.total_steps, self.max_minutes = total_steps, max_minutes
        console = Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), console=console,
                                 disable=not console.is_terminal)
        self.loss: float | None = None
        self.window: list[tuple[float, int, int]] = []  # (time, tokens, sentences) of recent steps

    def __enter__(self) -> TrainProgress:
        self.progress.start()
        self.task = self.progress.add_task("train", total=self.total_steps, info="")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def step(self, state: Any, loss: float, tokens: int, sentences: int) -> None:
        self.loss = loss if self.loss is None else 0.98 * self.loss + 0.02 * loss
        self.window = (self.window + [(time.monotonic(), tokens, sentences)])[-50:]
        if state.step % 10 == 0:
            self.update(state)

    def update(self, state: Any) -> None:
        tok_s = sent_s = 0.0
        eta = math.inf
        if len(self.window) > 1:
            span = max(self.window[-1][0] - self.window[0][0], 1e-9)
            tok_s = sum(w[1] for w in self.window[1:]) / span
            sent_s = sum(w[2] for w in self.window[1:]) / span
            if self.total_steps is not None:
                eta = (self.total_steps - state.step) * span / (len(self.window) - 1)
        if self.max_minutes is not None:
            eta = min(eta, self.max_minutes * 60 - state.elapsed)
        loss = f"{self.loss:.3f}" if self.loss is not None else "-"
        info = (f"loss {loss}  {tok_s:,.0f} tok/s  {sent_s:,.0f} sent/s  epoch {state.epoch + 1}  "
                f"elapsed {_clock(state.elapsed)}  ETA {_clock(eta) if eta < math.inf else '-'}")
        self.progress.update(self.task, completed=state.step, info=info)


class CountProgress:
    """A bar of work done out of its total on stderr (a terminal only), for work that reports
    its own count (``progress(done, total)``): a demo's epochs, say."""

    def __init__(self, label: str) -> None:
        console = Console(stderr=True)
        self.progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                 console=console, disable=not console.is_terminal, transient=True)
        self.task = self.progress.add_task(label, total=None)

    def __enter__(self) -> CountProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def __call__(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)  # rich redraws at its own pace
