"""What a training run knows besides its weights: the loop's counters and best scores (saved
in every checkpoint), and the validation records of metrics.jsonl."""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from nmt.errors import NmtError
from nmt.runtime.fileio import atomic_write_text

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Everything besides weights, optimiser and RNG that a resumed run needs (JSON-able)."""

    step: int = 0
    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of the current epoch done
    elapsed: float = 0.0  # seconds of training and validation so far, across resumes
    step_seconds: float = 0.0  # seconds inside optimiser steps alone, for throughput
    best_bleu: float = -1.0
    best_bleu_step: int = 0
    best_loss: float = math.inf  # of scheduled validations, for the lr decay
    stale_validations: int = 0  # scheduled validations since BLEU last improved
    best_scheduled_bleu: float = -1.0  # patience compares scheduled validations only
    target_tokens: int = 0
    sentences: int = 0
    scaler: dict = dataclasses.field(default_factory=dict)  # loss-scaler state (CUDA only)
    run_id: str = ""  # drawn when the run starts: marks every weights file the run writes as its own

    @classmethod
    def restore(cls, saved: dict, path: Path) -> TrainState:
        """The state saved in checkpoint ``path``, each field checked for its type and sign."""
        defaults = dataclasses.asdict(cls())
        for key, value in saved.items():
            if key not in defaults or not _fits(value, defaults[key]):
                raise NmtError(f"{path}: damaged training state ({key}: {value!r})")
        scaler = saved.get("scaler", {})
        if scaler and (scaler.keys() != _SCALER_KEYS or not all(_fits(v, 0.0) for v in scaler.values())):
            raise NmtError(f"{path}: damaged training state (scaler: {scaler!r})")
        return cls(**saved)


_SCALER_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}


def _fits(value: object, default: object) -> bool:
    """Whether a JSON value can stand for a field with ``default``: a count for an int, any
    number for a float, the same type otherwise."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default)
    if isinstance(default, int):
        return isinstance(value, int) and value >= 0
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


_METRIC_KEYS = ("step", "valid_loss", "valid_bleu")


def _metric(line: bytes) -> dict | None:
    """One validation record, or None for a line that is not one (cut short by a crash, damaged)."""
    try:
        record = json.loads(line)
    except ValueError:  # also invalid UTF-8
        return None
    ok = isinstance(record, dict) and all(isinstance(record.get(k), (int, float)) for k in _METRIC_KEYS)
    return record if ok else None


def read_metrics(path: Path) -> list[dict]:
    """The validation records of a run; lines that are not records are skipped with a warning."""
    lines = path.read_bytes().splitlines() if path.is_file() else []
    records = [r for r in map(_metric, lines) if r is not None]
    if len(records) < len(lines):
        log.warning("%s: skipped %d damaged lines", path, len(lines) - len(records))
    return records


def trim_metrics(path: Path, step: int) -> None:
    """Before a resume appends to ``path``: drop a line cut short by a crash and the records of
    validations after the checkpoint's ``step`` (the resumed run validates there again)."""
    if not path.is_file():
        return
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    kept = [line for line in lines if line.endswith(b"\n") and (r := _metric(line)) is not None
            and r["step"] <= step]
    if len(kept) < len(lines):
        log.warning("%s: dropped %d damaged or later lines before resuming", path, len(lines) - len(kept))
        atomic_write_text(path, b"".join(kept).decode("utf-8"))
