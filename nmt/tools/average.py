"""``nmt average``: the element-wise mean of weights a run kept (``--keep-checkpoints``), written
as another weights file of the run, as OpenNMT-py's ``average_models`` and fairseq's
``average_checkpoints.py`` do.

Every file is checked before any tensor is read: its tensors against the run's config.yaml,
and the run id in its metadata against the run's own (last.safetensors'), so that a file
copied in from another run is refused (:mod:`nmt.runtime.averaging` takes the mean).
"""
from __future__ import annotations

import json
from pathlib import Path

from nmt.config import read_run_config
from nmt.errors import NmtError, SettingError
from nmt.inference.loading import skeleton
from nmt.runtime.averaging import mean_of
from nmt.runtime.checkpoint import read_header, read_header_checked, write
from nmt.runtime.weights import DEFAULT, check_name, is_step_name, kept_path, kept_steps, summary_of

RESERVED = ("best", "last", DEFAULT)  # training's own, and the default's name: never an average's


def choose_steps(run_dir: Path, steps: list[int] | None, last: int | None) -> list[int]:
    """The kept steps to average: ``steps``, or the ``last`` N, or every one kept."""
    if not (run_dir / "config.yaml").is_file():
        raise NmtError(f"{run_dir}: {'not an nmt run directory' if run_dir.is_dir() else 'no such run directory'}")
    have = kept_steps(run_dir)
    if not have:
        raise NmtError(f"{run_dir} keeps no checkpoints to average; train it with --keep-checkpoints N")
    if steps:
        missing = [k for k in steps if k not in have]
        if missing:
            raise SettingError("steps", ",".join(map(str, steps)), f"{run_dir} keeps no step {missing[0]}; "
                               f"it keeps {', '.join(map(str, have))}")
        chosen = sorted(set(steps))
    else:
        if last is not None and last > len(have):
            raise SettingError("last", last, f"{run_dir} keeps only {len(have)}: steps {', '.join(map(str, have))}")
        chosen = have[-last:] if last else have
    if len(chosen) < 2:
        raise SettingError("last" if not steps else "steps", last or ",".join(map(str, steps or [])),
                           "an average needs at least two checkpoints")
    return chosen


def average(run_dir: Path, steps: list[int], name: str = "averaged") -> Path:
    """Write the mean of the kept weights of ``steps`` as ``run_dir/NAME.safetensors``."""
    check_name(name, "output")
    if name in RESERVED or is_step_name(name):
        raise SettingError("output", name, "is a name of the run's own weights (best, last, default, step-K); "
                           "choose another name")
    if not (run_dir / "config.yaml").is_file():
        raise NmtError(f"{run_dir}: not a run directory (no config.yaml)")
    if name == "averaged" and summary_of(run_dir).get("averaged"):
        raise SettingError("output", name, "averaged.safetensors is the average training made when the run "
                           "ended (run.json); name this one with -o NAME")
    model = skeleton(read_run_config(run_dir / "config.yaml").model)
    paths = [kept_path(run_dir, k) for k in steps]
    run_id = _run_id(run_dir / "last.safetensors") if (run_dir / "last.safetensors").is_file() else ""
    for path in paths:
        _, meta = read_header_checked(path, model)
        if run_id and _state(meta, path).get("run_id") != run_id:
            raise NmtError(f"{path}: not written by this run (its run id differs from last.safetensors'); "
                           "an average mixes only one run's checkpoints")
    keys = list(model.state_dict())
    out = run_dir / f"{name}.safetensors"
    write(out, mean_of(paths, [f"model.{k}" for k in keys]),
          {"state": json.dumps({"averaged_steps": steps, "run_id": run_id})})
    return out


def _run_id(path: Path) -> str:
    return str(_state(read_header(path)[1], path).get("run_id", ""))


def _state(meta: dict[str, str], path: Path) -> dict:
    try:
        state = json.loads(meta.get("state", "{}"))
    except ValueError:
        raise NmtError(f"{path}: damaged metadata (state is not JSON)") from None
    return state if isinstance(state, dict) else {}
