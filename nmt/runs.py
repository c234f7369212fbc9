"""Starting a run: directory, seed, device, data, model; then hand over to the Trainer."""
from __future__ import annotations

import json
import logging
import platform
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

import sacrebleu
import sentencepiece
import torch

from nmt import __version__
from nmt import checkpoint
from nmt.config import RunConfig, read_run_config, save_config
from nmt.devices import describe, pick_device, configure_cpu
from nmt.errors import NmtError
from nmt.fileio import atomic_write_text
from nmt.model import build_model, count_parameters
from nmt.prepare import RunData, absolute_sources, prepare_run_data
from nmt.tokenizer import PAD_ID
from nmt.train import Trainer, TrainState

log = logging.getLogger(__name__)


def new_run_dir(root: Path = Path("checkpoints")) -> Path:
    """A fresh timestamped directory name under ``root``."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = root / stamp, 1
    while path.exists():
        n += 1
        path = root / f"{stamp}-{n}"
    return path


@contextmanager
def _new_run_dir(run_dir: Path) -> Iterator[None]:
    """Create ``run_dir`` for the set-up inside; if the set-up fails, leave nothing behind."""
    if run_dir.exists() and not run_dir.is_dir():
        raise NmtError(f"--run-dir {run_dir}: exists and is not a directory")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise NmtError(f"--run-dir {run_dir}: exists and is not empty; choose another directory")
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NmtError(f"--run-dir {run_dir}: cannot create ({e.strerror})") from None
    try:
        yield
    except BaseException:
        for path in run_dir.iterdir():
            path.unlink()
        if created:
            run_dir.rmdir()
        raise


def train_new_run(config: RunConfig, run_dir: Path, strict: bool = False) -> TrainState:
    """Create ``run_dir``, prepare the data, build a seeded model and train it."""
    device = pick_device(config.train.device)
    configure_cpu(config.train.threads)
    with _new_run_dir(run_dir):
        data = prepare_run_data(config.data, run_dir, strict)
        config = data.sized(config).replace(**absolute_sources(config.data))
        save_config(config, run_dir / "config.yaml")
    torch.manual_seed(config.train.seed)
    model = build_model(config.model, PAD_ID, data.source_pieces, data.target_pieces).to(device)
    log.info("run %s: %d parameters, vocabulary %d: %d pieces in sources, %d in targets", run_dir,
             count_parameters(model), config.model.vocab, config.model.source_pieces,
             config.model.target_pieces)
    trainer = Trainer(config, model, data, run_dir, device)
    start = time.time()
    state = trainer.run()
    write_summary(run_dir, config, data, trainer, device, time.time() - start)
    return state


BUDGET_KEYS = ("epochs", "max_steps", "max_minutes")


def resume_run(run_dir: Path, budget: dict[str, float | int], strict: bool = False) -> TrainState:
    """Continue a run from last.safetensors: weights, optimiser, RNG, data order and budget.

    ``budget`` may change epochs/max_steps/max_minutes, which count from the run's start.
    """
    if not (run_dir / "config.yaml").is_file():
        raise NmtError(f"--resume {run_dir}: not a run directory (no config.yaml)")
    config = read_run_config(run_dir / "config.yaml")
    config = config.replace(**budget)
    device = pick_device(config.train.device)
    configure_cpu(config.train.threads)
    path = run_dir / "last.safetensors"
    tensors, meta = checkpoint.read(path)
    data = prepare_run_data(config.data, run_dir, strict, new_run=False)
    model = build_model(config.model, PAD_ID)
    checkpoint.load_model_weights(model, tensors, path)
    state = TrainState(**checkpoint.train_state(meta))
    trainer = Trainer(config, model.to(device), data, run_dir, device, state)
    checkpoint.load_optimizer(trainer.optimizer, tensors, meta)
    torch.set_rng_state(tensors["rng.torch"])
    save_config(config, run_dir / "config.yaml")
    start = time.time()
    state = trainer.run()
    write_summary(run_dir, config, data, trainer, device, time.time() - start)
    return state


def write_summary(run_dir: Path, config: RunConfig, data: RunData, trainer: Trainer,
                  device: torch.device, wall_s: float) -> None:
    """run.json: what a model card needs, beside the checkpoints."""
    s = trainer.state
    summary = {
        "nmt_version": __version__, "corpus": data.report.path,
        "pairs": {"read": data.report.kept, "skipped": sum(data.report.skipped.values()),
                  "train": len(data.train_src), "dropped_long": data.dropped_long,
                  "valid": len(data.split.valid), "test": len(data.split.test)},
        "parameters": count_parameters(trainer.model), "vocab_size": data.tokenizer.vocab_size,
        "steps": s.step, "epochs_completed": s.epoch, "train_seconds": round(s.elapsed, 1),
        "wall_seconds": round(wall_s, 1), "best_valid_bleu": s.best_bleu,
        "best_step": s.best_bleu_step,
        "train_tokens_per_s": round(s.target_tokens / max(s.step_seconds, 1e-9), 1),
        "train_sentences_per_s": round(s.sentences / max(s.step_seconds, 1e-9), 1),
        "device": describe(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "sentencepiece": sentencepiece.__version__, "sacrebleu": sacrebleu.__version__},
    }
    atomic_write_text(run_dir / "run.json", json.dumps(summary, indent=2) + "\n")
