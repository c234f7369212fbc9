"""The element-wise mean of checkpoints' weights, as OpenNMT-py's ``average_models`` and
fairseq's ``average_checkpoints.py`` take it: one tensor at a time, in float64, so memory holds
the result and one tensor of each file at most (about two models)."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from nmt.errors import NmtError


def mean_of(paths: list[Path], keys: list[str]) -> dict[str, torch.Tensor]:
    """Each float tensor ``keys`` names, averaged over the files ``paths``, in its own dtype;
    other tensors (the piece tables) must agree across the files and are taken as they are."""
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
