"""A run's weights files by name: ``best``, ``last``, ``averaged`` (the mean of the last
validations' weights that training writes at its end, or ``nmt average``), any name ``nmt average
-o`` gave, and ``step-K``, the weights of the validation at step K kept in ``checkpoints/``.
``default`` names the run's default weights: ``averaged`` where run.json says that it scored
better on validation than ``best``, else ``best``."""
from __future__ import annotations

import json
import re
from pathlib import Path

from nmt.errors import NmtError, SettingError

KEPT = "checkpoints"  # the run's folder of step-K.safetensors
DEFAULT = "default"  # not a file: the name of the run's default weights (default_weights)
_STEP = re.compile(r"step-(\d+)")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def kept_steps(run_dir: Path) -> list[int]:
    """The steps whose weights the run keeps, oldest first."""
    folder = run_dir / KEPT
    steps = [_STEP.fullmatch(p.name[:-len(".safetensors")]) for p in folder.glob("step-*.safetensors")] \
        if folder.is_dir() else []
    return sorted(int(m[1]) for m in steps if m)


def is_step_name(name: str) -> bool:
    """Whether ``name`` is a kept step's, ``step-K``: such names find the kept file, never another."""
    return _STEP.fullmatch(name) is not None


def kept_path(run_dir: Path, step: int) -> Path:
    return run_dir / KEPT / f"step-{step}.safetensors"


def check_name(name: str, setting: str = "weights") -> str:
    """A weights name that stays a plain file name in the run (no path, no hidden file)."""
    if not _NAME.fullmatch(name) or name.endswith(".safetensors"):
        raise SettingError(setting, name, "must be a name such as best, last, averaged or step-1200 "
                           "(letters, digits, . _ -)")
    return name


def summary_of(run_dir: Path) -> dict:
    """The run's run.json, written when a training session ends; {} before that, or where it
    is unreadable (nmt info reports a damaged one)."""
    try:
        summary = json.loads((run_dir / "run.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def default_weights(run_dir: Path) -> str:
    """The name of the run's default weights: run.json's ``default_weights``; ``best`` before
    a training session ended, or in a run older than the key."""
    name = summary_of(run_dir).get("default_weights")
    return name if name in ("best", "averaged") else "best"


def weights_path(run_dir: Path, name: str = DEFAULT) -> Path:
    """The file of the weights called ``name`` (``default``: :func:`default_weights`); ``best``
    falls back to last.safetensors in a run that has not validated yet. An error lists the
    weights the run has."""
    check_name(name)
    if name == DEFAULT:
        name = default_weights(run_dir)
    step = _STEP.fullmatch(name)
    path = kept_path(run_dir, int(step[1])) if step else run_dir / f"{name}.safetensors"
    if path.is_file():
        return path
    if name == "best" and (run_dir / "last.safetensors").is_file():
        return run_dir / "last.safetensors"
    have = available(run_dir)
    if not have:
        raise NmtError(f"{run_dir}: no best.safetensors or last.safetensors; the run saved no weights yet")
    raise SettingError("weights", name, f"{run_dir} has no such weights; it has {', '.join(have)}")


def available(run_dir: Path) -> list[str]:
    """The names of the weights a run holds: its own files, then the kept steps."""
    names = sorted(p.name[:-len(".safetensors")] for p in run_dir.glob("*.safetensors")
                   if not p.name.startswith(".") and not is_step_name(p.name[:-len(".safetensors")]))
    return names + [f"step-{k}" for k in kept_steps(run_dir)]
