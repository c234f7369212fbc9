"""Checkpoints: weights, optimiser and RNG in safetensors, training state in JSON; nothing is
unpickled, and every tensor is checked against the model it is for from the file's header
before anything is read. Written atomically. (A run directory's other files, and building a
model from them: :mod:`nmt.inference.loading`.)
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from nmt import __version__
from nmt.errors import NmtError
from nmt.runtime.fileio import atomic_path

FORMAT = "nmt-checkpoint-1"


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
         state: dict[str, Any] | None = None) -> None:
    """Write weights (and optionally the optimiser and JSON-able state) atomically."""
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    meta = {"state": json.dumps(state or {})}
    if optimizer is not None:
        opt = optimizer.state_dict()
        for pid, slots in opt["state"].items():
            for name, value in slots.items():
                tensors[f"optim.{pid}.{name}"] = torch.as_tensor(value).detach().contiguous()
        meta["optim_groups"] = json.dumps(opt["param_groups"])
    tensors["rng.torch"] = torch.get_rng_state()
    write(path, tensors, meta)


def write(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """``tensors`` (``model.``-prefixed weights, and what else :func:`save` puts in) written
    atomically with this format's metadata and ``meta``."""
    meta = {"format": FORMAT, "nmt_version": __version__, "state": "{}", **meta}
    try:
        with atomic_path(path) as tmp:
            save_file({k: v.cpu() for k, v in tensors.items()}, str(tmp), metadata=meta)
    except (OSError, SafetensorError) as e:
        raise NmtError(f"{path}: cannot write the checkpoint ({getattr(e, 'strerror', None) or e})") from None


_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}
_ITEM_BYTES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
_MAX_HEADER = 100 * 2**20
_ADAM_SLOTS = ("step", "exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's dtype (safetensors' name, e.g. ``F32``) and shape."""

    dtype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def specs_of(tensors: dict[str, torch.Tensor], prefix: str = "") -> dict[str, TensorSpec]:
    """Specs of named tensors; meta-device tensors will do, since only shapes matter."""
    return {prefix + k: TensorSpec(_DTYPES.get(v.dtype, str(v.dtype)), tuple(v.shape))
            for k, v in tensors.items()}


def read_header(path: Path) -> tuple[dict[str, TensorSpec], dict[str, str]]:
    """Each tensor's spec and the metadata of a safetensors file, from its header alone:
    nothing is allocated for the tensors, so a hostile file cannot exhaust the memory."""
    if not path.is_file():
        raise NmtError(f"{path}: no such checkpoint file")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = int.from_bytes(f.read(8), "little")
            if not 2 <= n <= min(_MAX_HEADER, size - 8):
                raise ValueError("header length out of range")
            header = json.loads(f.read(n))
        meta = header.pop("__metadata__", None) or {}
        specs = {name: _spec(info, size - 8 - n) for name, info in header.items()}
        if not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("metadata values must be strings")
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise NmtError(f"{path}: truncated or corrupted checkpoint ({e})") from None
    if meta.get("format") != FORMAT:
        raise NmtError(f"{path}: not an {FORMAT} file (written by an incompatible nmt version?)")
    return specs, meta


def _spec(info: dict, data_bytes: int) -> TensorSpec:
    dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
    if dtype not in _ITEM_BYTES or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"unsupported tensor {dtype}{list(shape)}")
    if not 0 <= begin <= end <= data_bytes or end - begin != math.prod(shape) * _ITEM_BYTES[dtype]:
        raise ValueError("tensor data outside the file")
    return TensorSpec(dtype, shape)


def training_specs(model: nn.Module) -> dict[str, TensorSpec]:
    """What last.safetensors may hold besides the weights: Adam's slots per parameter (in
    ``model.parameters()`` order) and the RNG state."""
    specs = {"rng.torch": TensorSpec("U8", tuple(torch.get_rng_state().shape))}
    for pid, param in enumerate(model.parameters()):
        specs[f"optim.{pid}.step"] = TensorSpec("F32", ())
        for slot in ("exp_avg", "exp_avg_sq"):
            specs[f"optim.{pid}.{slot}"] = TensorSpec(_DTYPES[param.dtype], tuple(param.shape))
    return specs


def read_header_checked(path: Path, model: nn.Module) -> tuple[dict[str, TensorSpec], dict[str, str]]:
    """The header of checkpoint ``path``, every tensor in it checked against ``model`` (its
    shapes: a meta-device model will do) and the optimiser slots it may have."""
    specs, meta = read_header(path)
    _check_specs(path, specs, specs_of(model.state_dict(), "model."), training_specs(model))
    return specs, meta


def read(path: Path, model: nn.Module, training: bool = False
         ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a checkpoint for ``model`` (built on the meta device, it costs no
    memory), and its metadata.

    Every tensor's name and shape is checked against ``model`` and the optimiser's slots from
    the file's header before any is loaded; an unexpected, missing or misshapen tensor is an
    error. Loaded weights must be finite. ``training`` also loads the optimiser and RNG state.
    """
    specs, meta = read_header(path)
    expected = specs_of(model.state_dict(), "model.")
    _check_specs(path, specs, expected, training_specs(model))
    if training and "rng.torch" not in specs:
        raise NmtError(f"{path}: no RNG state; not a checkpoint to resume from")
    wanted = [k for k in specs if k in expected or training]
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {key: f.get_tensor(key) for key in wanted}
    except (SafetensorError, OSError, ValueError) as e:
        raise NmtError(f"{path}: truncated or corrupted checkpoint ({e})") from None
    for key in expected:
        if tensors[key].is_floating_point() and not torch.isfinite(tensors[key]).all():
            raise NmtError(f"{path}: weights are not finite (NaN or infinity in {key}); the "
                           f"checkpoint is damaged or its training diverged")
    return tensors, meta


def _check_specs(path: Path, specs: dict[str, TensorSpec], expected: dict[str, TensorSpec],
                 extra: dict[str, TensorSpec]) -> None:
    missing = [k for k in expected if k not in specs]
    if missing:
        raise NmtError(f"{path}: weights do not fit the model in config.yaml ({len(missing)} "
                       f"missing, e.g. {missing[0]})")
    for key, spec in specs.items():
        want = expected.get(key) or extra.get(key)
        if want is None:
            raise NmtError(f"{path}: unexpected tensor {key} ({spec}); not a checkpoint of this run")
        if spec != want and not (key.endswith(".step") and spec.shape == () and spec.dtype in ("F32", "F64")):
            raise NmtError(f"{path}: tensor {key} is {spec}, but the model in config.yaml needs {want}")
    for pid in {k.split(".")[1] for k in specs if k.startswith("optim.")}:
        if not all(f"optim.{pid}.{slot}" in specs for slot in _ADAM_SLOTS):
            raise NmtError(f"{path}: incomplete optimiser state for parameter {pid}")


def load_model_weights(model: nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as e:
        raise NmtError(f"{path}: weights do not fit the model in config.yaml "
                       f"({str(e).splitlines()[0]})") from None


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                   meta: dict[str, str], path: Path) -> None:
    """Restore the optimiser from tensors checked by :func:`read` and its groups' metadata,
    each group checked against ``optimizer``'s own (keys, parameters, value types)."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    state = dict(sorted(state.items()))
    _check_optimizer_tensors(path, tensors)
    groups = _json(meta.get("optim_groups"), list, path, "optimiser groups")
    fresh = optimizer.state_dict()["param_groups"]
    if len(groups) != len(fresh) or not all(_same_group(g, f) for g, f in zip(groups, fresh)):
        raise NmtError(f"{path}: optimiser groups do not fit this model's optimiser")
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _same_group(group: Any, fresh: dict[str, Any]) -> bool:
    """Whether a saved Adam group fits ``fresh`` (this optimiser's): its keys among fresh's
    (a newer torch may add some), the same parameters, values of the same kinds, and
    hyperparameters Adam can step with."""
    if not isinstance(group, dict) or not {"params", "lr", "betas", "eps", "weight_decay"} <= group.keys() <= fresh.keys():
        return False
    if group["params"] != fresh["params"]:
        return False
    for key, value in group.items():
        want = fresh[key]
        number = isinstance(want, (int, float)) and not isinstance(want, bool)
        kind = (int, float) if number else list if isinstance(want, tuple) else type(want)
        if not isinstance(value, kind) or isinstance(value, bool) != isinstance(want, bool):
            return False
    betas = group["betas"]
    return (_finite(group["lr"], group["eps"], group["weight_decay"]) and group["lr"] > 0
            and group["eps"] > 0 and group["weight_decay"] >= 0 and len(betas) == 2
            and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas))


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _check_optimizer_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Adam's slots must be finite, its second moments non-negative, its step counts >= 1."""
    for key, value in tensors.items():
        if not key.startswith("optim."):
            continue
        ok = bool(torch.isfinite(value).all())
        if key.endswith(".exp_avg_sq"):
            ok = ok and bool((value >= 0).all())
        elif key.endswith(".step"):
            ok = ok and float(value) >= 1
        if not ok:
            raise NmtError(f"{path}: damaged optimiser state ({key})")


def _json(text: str | None, kind: type, path: Path, what: str) -> Any:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        value = None
    if not isinstance(value, kind):
        raise NmtError(f"{path}: damaged {what} in the checkpoint's metadata")
    return value


def train_state(meta: dict[str, str], path: Path) -> dict[str, Any]:
    """The JSON training state saved with a checkpoint (a mapping; its fields are the caller's)."""
    return _json(meta.get("state", "{}"), dict, path, "training state")
