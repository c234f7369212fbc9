"""A trained run, loaded for use: its newest directory, its weights file, and its model and
tokenizer rebuilt from its files alone, each checked against config.yaml first.

Layout of a run directory::

    config.yaml        resolved RunConfig (data, model, train)
    spm.model          the joint SentencePiece model
    valid.tsv test.tsv held-out pairs (source<TAB>target), fixed at the run's start
    best.safetensors   weights with the best validation BLEU
    last.safetensors   weights + optimiser + RNG + training state, for resuming
    checkpoints/       step-K.safetensors: the last validations' weights (--keep-checkpoints)
    averaged.safetensors  their mean (nmt average)
    metrics.jsonl      one JSON object per validation
    hypotheses/        nmt compare's outputs, kept by what decoded them (nmt.comparison.cache)
    run.json           summary: corpus, sizes, device, time, versions
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from nmt.config import ModelConfig, RunConfig, read_run_config
from nmt.data.tokenizer import PAD_ID, Tokenizer
from nmt.errors import NmtError, SettingError
from nmt.models.build import build_model
from nmt.runtime.checkpoint import load_model_weights, read
from nmt.runtime.weights import weights_path

log = logging.getLogger(__name__)

HYPOTHESES = "hypotheses"  # nmt compare's cache in a run (nmt.comparison.cache)


def latest_run(root: Path = Path("checkpoints")) -> Path:
    """The most recently modified run directory under ``root`` that has validated weights
    (a config.yaml and a best.safetensors: a run still before its first checkpoint is passed
    over), named in the log, since the caller did not choose it."""
    runs = [p.parent for p in root.glob("*/best.safetensors") if (p.parent / "config.yaml").is_file()] \
        if root.is_dir() else []
    if not runs:
        started = root.is_dir() and any(root.glob("*/config.yaml"))
        raise SettingError(None, None, f"no trained run found in {root}/"
                           + (" (the runs there have no best.safetensors yet)" if started else "")
                           + "; train one with `nmt train` or give {checkpoint} RUN_DIR", ("checkpoint",))
    run = max(runs, key=_last_modified)
    log.info("using %s, the newest run in %s/ with best.safetensors", run, root)
    return run


def _last_modified(run_dir: Path) -> float:
    """When the run last changed: its newest file, leaving out the hypotheses nmt compare
    keeps there (comparing an old run does not make it the newest)."""
    times = []
    for f in run_dir.iterdir():
        if f.name == HYPOTHESES:
            continue
        try:
            times.append(f.stat().st_mtime)
        except FileNotFoundError:  # a temporary file renamed away by a running job
            continue
    return max(times, default=0.0)


def skeleton(cfg: ModelConfig) -> nn.Module:
    """The model ``cfg`` describes, on the meta device: every shape, no memory, so a
    checkpoint's header can be checked against it before anything is allocated."""
    with torch.device("meta"):
        return build_model(cfg, PAD_ID)


def check_tokenizer(tokenizer: Tokenizer, cfg: ModelConfig) -> None:
    """The run's spm.model must be the one its model was trained with (piece count and hash)."""
    if (cfg.vocab and tokenizer.vocab_size != cfg.vocab) or (
            cfg.tokenizer_sha256 and tokenizer.sha256 != cfg.tokenizer_sha256):
        raise NmtError(f"{tokenizer.model_path}: not the tokenizer this run was trained with "
                       f"({tokenizer.vocab_size} pieces, sha256 {tokenizer.sha256[:12]}…; config.yaml "
                       f"expects {cfg.vocab} pieces{', sha256 ' + cfg.tokenizer_sha256[:12] + '…' if cfg.tokenizer_sha256 else ''}); "
                       f"restore the run's own spm.model")


def load_run(run_dir: Path, device: torch.device, weights: str = "default"
             ) -> tuple[RunConfig, nn.Module, Tokenizer]:
    """Rebuild a run's model, with the weights called ``weights`` (:mod:`nmt.runtime.weights`),
    and its tokenizer from its directory alone, each file checked against config.yaml before
    the model is built.

    :return: (RunConfig, Seq2Seq in eval mode on ``device``, Tokenizer)
    """
    if not run_dir.is_dir():
        raise NmtError(f"{run_dir}: not a run directory")
    config = read_run_config(run_dir / "config.yaml")
    tokenizer = Tokenizer(run_dir / "spm.model")
    check_tokenizer(tokenizer, config.model)
    path = weights_path(run_dir, weights)
    tensors, _ = read(path, skeleton(config.model))
    model = build_model(config.model, PAD_ID)
    load_model_weights(model, tensors, path)
    return config, model.to(device).eval(), tokenizer
