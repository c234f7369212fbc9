"""TensorBoard event files of a run (``--tensorboard``), as OpenNMT-py, fairseq and JoeyNMT
write them: ``RUN/tensorboard/`` gets the training loss, learning rate, gradient norm (before
clipping) and throughput of every step, and the validation loss, perplexity, BLEU and a few
sample translations of every validation.

torch writes the files; the ``tensorboard`` package is an optional extra. Only the process
that writes the run (rank 0) writes them. A resumed run appends to the same log: events of
steps after the one it resumes from, left by the interrupted process, are purged first
(``purge_step``), so no step appears twice.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from nmt.errors import SettingError
from nmt.training.state import TrainState

FOLDER = "tensorboard"
INSTALL = 'pip install -e ".[tensorboard]" (or pip install tensorboard)'


def require_tensorboard() -> type:
    """torch's SummaryWriter, or an error that says how to install what it needs."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise SettingError("tensorboard", True, f"needs the tensorboard package: {INSTALL}") from None
    return SummaryWriter


def check_folder(run_dir: Path) -> None:
    """Refuse, before training, a run whose event folder's place holds something else."""
    folder = run_dir / FOLDER
    if folder.exists() and not folder.is_dir():
        raise SettingError("tensorboard", True, f"writes its event files into {folder}, which is a file, not a "
                                                "directory; move it away, or train without --tensorboard")


class TensorBoardLog:
    """The event files of ``run_dir``, from ``state``'s step on."""

    def __init__(self, run_dir: Path, state: TrainState) -> None:
        writer = require_tensorboard()
        check_folder(run_dir)
        self.writer: Any = writer(str(run_dir / FOLDER), purge_step=state.step + 1 if state.step else None,
                                  flush_secs=30)

    def step(self, state: TrainState, loss: float, tokens: int, lr: float, grad_norm: float,
             seconds: float) -> None:
        for name, value in (("train/loss", loss), ("train/lr", lr), ("train/grad_norm", grad_norm),
                            ("train/tokens_per_s", tokens / max(seconds, 1e-9))):
            self.writer.add_scalar(name, value, state.step)

    def validation(self, state: TrainState, record: dict, samples: list[tuple[str, str, str]]) -> None:
        for key in ("valid_loss", "valid_ppl", "valid_bleu"):
            if key in record:
                self.writer.add_scalar(key.replace("_", "/", 1), record[key], state.step)
        if samples:
            rows = "".join(f"<tr><td>{html.escape(s)}</td><td>{html.escape(h)}</td><td>{html.escape(r)}</td></tr>"
                           for s, h, r in samples)
            self.writer.add_text("valid/samples", f"<table><tr><th>source</th><th>translation</th>"
                                                  f"<th>reference</th></tr>{rows}</table>", state.step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
