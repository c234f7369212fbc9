"""Run directories: weights in safetensors, config and state in YAML/JSON; nothing is unpickled.

Layout of a run directory::

    config.yaml        resolved RunConfig (data, model, train)
    spm.model          the joint SentencePiece model
    valid.tsv test.tsv held-out pairs (source<TAB>target), fixed at the run's start
    best.safetensors   weights with the best validation BLEU
    last.safetensors   weights + optimiser + RNG + training state, for resuming
    metrics.jsonl      one JSON object per validation
    run.json           summary: corpus, sizes, device, time, versions
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from nmt import __version__
from nmt.errors import NmtError
from nmt.fileio import atomic_path

FORMAT = "nmt-checkpoint-1"


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
         state: dict[str, Any] | None = None) -> None:
    """Write weights (and optionally the optimiser and JSON-able state) atomically."""
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "nmt_version": __version__, "state": json.dumps(state or {})}
    if optimizer is not None:
        opt = optimizer.state_dict()
        for pid, slots in opt["state"].items():
            for name, value in slots.items():
                tensors[f"optim.{pid}.{name}"] = torch.as_tensor(value).detach().contiguous()
        meta["optim_groups"] = json.dumps(opt["param_groups"])
    tensors["rng.torch"] = torch.get_rng_state()
    with atomic_path(path) as tmp:
        save_file({k: v.cpu() for k, v in tensors.items()}, str(tmp), metadata=meta)


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a checkpoint file; a clear error for missing or damaged files."""
    if not path.is_file():
        raise NmtError(f"{path}: no such checkpoint file")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise NmtError(f"{path}: truncated or corrupted checkpoint ({e})") from None
    if meta.get("format") != FORMAT:
        raise NmtError(f"{path}: not an {FORMAT} file (written by an incompatible nmt version?)")
    return tensors, meta


def load_model_weights(model: nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as e:
        raise NmtError(f"{path}: weights do not fit the model in config.yaml "
                       f"({str(e).splitlines()[0]})") from None


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                   meta: dict[str, str]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    state = dict(sorted(state.items()))
    optimizer.load_state_dict({"state": state, "param_groups": json.loads(meta["optim_groups"])})


def train_state(meta: dict[str, str]) -> dict[str, Any]:
    return json.loads(meta.get("state", "{}"))


def latest_run(root: Path = Path("checkpoints")) -> Path:
    """The most recently modified run directory under ``root`` (one holding a config.yaml)."""
    runs = [p.parent for p in root.glob("*/config.yaml")] if root.is_dir() else []
    if not runs:
        raise NmtError(f"no trained run found in {root}/; train one with `nmt train` "
                       f"or pass --checkpoint RUN_DIR")
    return max(runs, key=_last_modified)


def _last_modified(run_dir: Path) -> float:
    times = []
    for f in run_dir.iterdir():
        try:
            times.append(f.stat().st_mtime)
        except FileNotFoundError:  # a temporary file renamed away by a running job
            continue
    return max(times, default=0.0)


def weights_file(run_dir: Path) -> Path:
    """best.safetensors, or last.safetensors for a run that has not validated yet."""
    for name in ("best.safetensors", "last.safetensors"):
        if (run_dir / name).is_file():
            return run_dir / name
    raise NmtError(f"{run_dir}: no best.safetensors or last.safetensors; the run saved no weights yet")


def load_run(run_dir: Path, device: torch.device):
    """Rebuild a run's model and tokenizer from its directory alone.

    :return: (RunConfig, Seq2Seq in eval mode on ``device``, Tokenizer)
    """
    from nmt.config import read_run_config
    from nmt.model import build_model
    from nmt.tokenizer import PAD_ID, Tokenizer

    if not run_dir.is_dir():
        raise NmtError(f"{run_dir}: not a run directory")
    config = read_run_config(run_dir / "config.yaml")
    tokenizer = Tokenizer(run_dir / "spm.model")
    model = build_model(config.model, PAD_ID)
    path = weights_file(run_dir)
    tensors, _ = read(path)
    load_model_weights(model, tensors, path)
    return config, model.to(device).eval(), tokenizer
