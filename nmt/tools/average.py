"""``nmt average``: the element-wise mean of weights a run kept (``--keep-checkpoints``), written
as another weights file of the run, as OpenNMT-py's ``average_models`` and fairseq's
``average_checkpoints.py`` do.

Every file is checked before any tensor is read: its tensors against the run's config.yaml,
and the run id in its metadata against the run's own (last.safetensors'), so that a file
copied in from another run is refused. The mean is taken one tensor at a time, in float64, so
memory holds the result and one tensor of each file at most: about two models.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from nmt.config import read_run_config
from nmt.errors import NmtError, SettingError
from nmt.inference.loading import skeleton
from nmt.runtime.checkpoint import read_header, read_header_checked, write
from nmt.runtime.weights import check_name, kept_path, kept_steps

RESERVED = ("best", "last")  # written by training; an average never replaces them


def choose_steps(run_dir: Path, steps: list[int] | None, last: int | None) -> list[int]:
    """The kept steps to average: ``steps``, or the ``last`` N, or every one kept."""
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
    if name in RESERVED:
        raise SettingError("output", name, f"{name}.safetensors is training's own; choose another name")
    if not (run_dir / "config.yaml").is_file():
        raise NmtError(f"{run_dir}: not a run directory (no config.yaml)")
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
    write(out, _mean(paths, [f"model.{k}" for k in keys]),
          {"state": json.dumps({"averaged_steps": steps, "run_id": run_id})})
    return out


def _mean(paths: list[Path], keys: list[str]) -> dict[str, torch.Tensor]:
    """Each float tensor's mean over ``paths``; other tensors (the piece tables) must agree."""
    try:
        files = [safe_open(str(p), framework="pt") for p in paths]
        result = {}
        for key in keys:
            first = files[0].get_tensor(key)
            if not first.is_floating_point():
                if any(not torch.equal(f.get_tensor(key), first) for f in files[1:]):
                    raise NmtError(f"{key} differs between the checkpoints; not one run's")
                result[key] = first
                continue
            total = first.double()
            for f in files[1:]:
                total += f.get_tensor(key).double()
            mean = (total / len(files)).to(first.dtype)
            if not torch.isfinite(mean).all():
                raise NmtError(f"{key} is not finite in the average (NaN or infinity in a checkpoint)")
            result[key] = mean
        return result
    except (SafetensorError, OSError, ValueError) as e:
        raise NmtError(f"truncated or corrupted checkpoint ({e})") from None


def _run_id(path: Path) -> str:
    return str(_state(read_header(path)[1], path).get("run_id", ""))


def _state(meta: dict[str, str], path: Path) -> dict:
    try:
        state = json.loads(meta.get("state", "{}"))
    except ValueError:
        raise NmtError(f"{path}: damaged metadata (state is not JSON)") from None
    return state if isinstance(state, dict) else {}
