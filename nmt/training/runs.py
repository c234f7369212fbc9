"""Starting a run: directory, seed, device, data, model; then hand over to the Trainer."""
from __future__ import annotations

import dataclasses
import json
import logging
import platform
import shutil
import time
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import sacrebleu
import sentencepiece
import torch

from nmt import __version__
from nmt.config import RunConfig, read_run_config, save_config
from nmt.data.manifest import MANIFEST, content
from nmt.data.prepare import RunData, adopt_prepared, check_run_data, data_dir, open_run_data, prepare_run_data
from nmt.data.sources import absolute_sources, check_regular_files
from nmt.data.tokenizer import PAD_ID, Tokenizer
from nmt.errors import NmtError, SettingError
from nmt.inference import loading
from nmt.models.build import build_model, count_parameters
from nmt.models.interface import TranslationModel
from nmt.runtime import checkpoint
from nmt.runtime.devices import configure_cpu, describe
from nmt.runtime.fileio import atomic_path, atomic_write_text
from nmt.runtime.lock import LOCK_FILE, run_lock
from nmt.runtime.precision import resolve
from nmt.runtime.weights import summary_of
from nmt.training import distributed, finetune
from nmt.training.distributed import Processes
from nmt.training.run_writer import RunWriter
from nmt.training.state import TrainState, trim_metrics
from nmt.training.tensorboard import require_tensorboard
from nmt.training.callbacks import TrainCallbacks
from nmt.training.schedule import make_optimizer
from nmt.training.trainer import Trainer

log = logging.getLogger(__name__)


def new_run_dir(root: Path = Path("checkpoints")) -> Path:
    """A fresh timestamped directory name under ``root``."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = root / stamp, 1
    while path.exists():
        n += 1
        path = root / f"{stamp}-{n}"
    return path


def _fresh_run_dir(run_dir: Path) -> bool:
    """Check that ``run_dir`` can hold a new run, create it; returns whether it was created."""
    if run_dir.exists() and not run_dir.is_dir():
        raise SettingError("run_dir", run_dir, "exists and is not a directory")
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SettingError("run_dir", run_dir, f"cannot create ({e.strerror})") from None
    return created


def _check_empty(run_dir: Path, lock_existed: bool) -> None:
    if any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        if not lock_existed:
            (run_dir / LOCK_FILE).unlink(missing_ok=True)
        raise SettingError("run_dir", run_dir, "exists and is not empty; choose another directory")


@contextmanager
def _set_up(run_dir: Path, created: bool) -> Iterator[None]:
    """If the set-up inside fails, leave nothing behind (the lock is held: no one else writes)."""
    try:
        yield
    except BaseException:
        for path in run_dir.iterdir():
            path.unlink()
        if created:
            run_dir.rmdir()
        raise


def train_new_run(config: RunConfig, run_dir: Path, strict: bool = False) -> TrainState:
    """Create ``run_dir``, prepare the data, build a seeded model and train it, holding the
    run directory's lock throughout. Among several processes (torchrun), rank 0 creates,
    locks and writes the run (its ``run_dir`` counts) and the others read what it prepared."""
    with distributed.joined(config.train.device) as processes, ExitStack() as held:
        configure_cpu(config.train.threads, processes.local_world)
        resolve(config.train.precision, processes.device)  # one the device lacks fails before any work
        if config.train.tensorboard:
            require_tensorboard()  # so does a missing package
        run_dir = processes.broadcast(run_dir)
        with distributed.leading(processes):
            if processes.is_main:
                config, data = _set_up_new_run(config, run_dir, strict, held)
        if not processes.is_main:
            config, data = _follow_new_run(run_dir, processes.rank)
        torch.manual_seed(config.train.seed)
        if config.train.init_from:  # fine-tuning: the parent's weights, as they are
            model = finetune.parent_model(Path(config.train.init_from), processes.device)
            unknown = finetune.report_unknown(data, model) if processes.is_main else {}
        else:
            model = build_model(config.model, PAD_ID, *data.rows(config)).to(processes.device)
            unknown = None
        log.info("run %s: %d parameters, vocabulary %d: %d pieces in sources, %d in targets", run_dir,
                 count_parameters(model), config.model.vocab, config.model.source_pieces,
                 config.model.target_pieces)
        return _train(config, model, data, run_dir, processes, unknown=unknown)


def _set_up_new_run(config: RunConfig, run_dir: Path, strict: bool, held: ExitStack) -> tuple[RunConfig, RunData]:
    """Create and lock ``run_dir`` (the lock stays in ``held``), prepare the data, save the config."""
    check_regular_files(config.data)  # before the run directory exists
    created = _fresh_run_dir(run_dir)
    lock_existed = (run_dir / LOCK_FILE).exists()
    held.enter_context(run_lock(run_dir))
    _check_empty(run_dir, lock_existed)
    parent = Path(config.train.init_from) if config.train.init_from else None
    with _set_up(run_dir, created):
        cut_with = finetune.parent_tokenizer(parent, finetune.parent_config(parent)) if parent else None
        if config.data.data is not None:  # prepared once (nmt prepare), opened by every run
            config = dataclasses.replace(config, data=adopt_prepared(config.data))
            data = open_run_data(Path(config.data.data))
            if cut_with is not None:
                finetune.check_prepared_tokenizer(data.tokenizer, config, Path(config.data.data))
            for name in ("spm.model", "valid.tsv", "test.tsv"):  # what translating and scoring the run read
                with atomic_path(run_dir / name) as tmp:
                    shutil.copyfile(Path(config.data.data) / name, tmp)
        else:
            data = prepare_run_data(config.data, run_dir, strict, cut_with=cut_with)
        config = config.for_corpus(len(data.train_src))
        check_sampling(config, data, parent)
        if cut_with is None:  # a fine-tuned run keeps its parent's model and rows
            config = data.sized(config)
        if config.train.by_corpus_size:
            log.info("set by the corpus size: %s", config.train.by_corpus_size)
        config = config.replace(**absolute_sources(config.data))
        save_config(config, run_dir / "config.yaml")
    return config, data


def check_sampling(config: RunConfig, data: RunData, parent: Path | None) -> None:
    """Subword sampling needs the training pairs' text, and rows for every piece."""
    if not config.train.subword_alpha:
        return
    if data.train_text is None:
        raise SettingError("subword_alpha", config.train.subword_alpha, "samples segmentations of the training "
                           "text, which data prepared by an older nmt lacks; prepare it again, or give 0")
    if config.train.subword_nbest == -1:
        raise SettingError("subword_nbest", -1, "(the whole lattice, as an older nmt sampled) is not reproducible; "
                           "give the number of best segmentations to sample from, e.g. 16")
    m = config.model
    if parent is not None and not m.vocab == m.source_pieces == m.target_pieces:
        raise SettingError("subword_alpha", config.train.subword_alpha, f"{parent} has rows only for the pieces "
                           "of its training pairs' best segmentations, and a sampled one may hold others; give 0")


def _follow_new_run(run_dir: Path, rank: int) -> tuple[RunConfig, RunData]:
    """The config and data rank 0 prepared in ``run_dir``, read by another rank."""
    if not (run_dir / "config.yaml").is_file():
        raise NmtError(f"{run_dir}: rank {rank} cannot see the run rank 0 prepared; on several machines "
                       "the run directory must be on a filesystem all of them share")
    config = read_run_config(run_dir / "config.yaml")
    return config, open_run_data(data_dir(config.data, run_dir))


BUDGET_KEYS = ("epochs", "max_steps", "max_minutes")
# how fast a session runs, not what it learns: a resume may take another machine's core count
SESSION_KEYS = ("threads",)


def resume_run(run_dir: Path, budget: dict[str, Any], strict: bool = False) -> TrainState:
    """Continue a run from last.safetensors: weights, optimiser, RNG, data order and budget.

    ``budget`` may change epochs/max_steps/max_minutes, which count from the run's start, and
    threads; any other setting in it is refused, since the run goes on with its saved config.
    Every saved file is checked before the first step; the run's lock is held throughout (by
    rank 0, among several processes, which may be more or fewer than the run started with).
    """
    budget = dict(budget)
    moved_data = budget.pop("data", None)  # prepared data found elsewhere since the run started
    other = sorted(set(budget) - set(BUDGET_KEYS) - set(SESSION_KEYS))
    if other:
        raise SettingError("resume", None, "continues a run with its saved config; it cannot take "
                           + ", ".join(f"{{{name}}}" for name in other), tuple(other))
    if not (run_dir / "config.yaml").is_file():
        raise SettingError("resume", run_dir, "not a run directory (no config.yaml)")
    config = read_run_config(run_dir / "config.yaml").replace(**budget)
    if moved_data is not None:
        config = _with_moved_data(config, Path(moved_data))
    with distributed.joined(config.train.device) as processes, ExitStack() as held:
        with distributed.leading(processes):
            if processes.is_main:
                held.enter_context(run_lock(run_dir))
        configure_cpu(config.train.threads, processes.local_world)
        path = run_dir / "last.safetensors"
        tokenizer = Tokenizer(run_dir / "spm.model")
        loading.check_tokenizer(tokenizer, config.model)
        tensors, meta = checkpoint.read(path, loading.skeleton(config.model), training=True)
        state = TrainState.restore(checkpoint.train_state(meta, path), path)
        model = build_model(config.model, PAD_ID)
        checkpoint.load_model_weights(model, tensors, path)
        optimizer = make_optimizer(model.to(processes.device), config.train.lr, processes.device)
        checkpoint.load_optimizer(optimizer, tensors, meta, path)
        with distributed.leading(processes):
            if processes.is_main:
                _check_data(config, run_dir, strict, tokenizer)
        data = open_run_data(data_dir(config.data, run_dir), tokenizer)
        try:
            torch.set_rng_state(tensors["rng.torch"])
        except RuntimeError:
            raise NmtError(f"{path}: damaged RNG state") from None
        if processes.is_main:
            trim_metrics(run_dir / "metrics.jsonl", state.step)
            save_config(config, run_dir / "config.yaml")
        return _train(config, model, data, run_dir, processes, state, optimizer)


def _with_moved_data(config: RunConfig, directory: Path) -> RunConfig:
    """``config`` training on ``directory``: the prepared data it started with, moved (its
    data.json has the SHA-256 the run recorded)."""
    if config.data.data is None:
        raise SettingError("data", directory, "this run prepared its data in itself; resume it without --data")
    path = directory / MANIFEST
    if not path.is_file() or content(path)["sha256"] != config.data.data_sha256:
        raise SettingError("data", directory, f"not the data this run started with ({MANIFEST} "
                           f"{'missing' if not path.is_file() else 'differs from the one it recorded'})")
    return config.replace(data=str(directory.resolve()))


def _check_data(config: RunConfig, run_dir: Path, strict: bool, tokenizer: Tokenizer) -> None:
    """The run's prepared data, checked against the files it came from; a run an older nmt
    prepared without data.json gets its encoded pairs now, from the same files (once)."""
    if config.data.data is not None or (run_dir / MANIFEST).exists():
        check_run_data(config.data, run_dir)
    else:
        prepare_run_data(config.data, run_dir, strict, tokenizer=tokenizer)


def _train(config: RunConfig, model: TranslationModel, data: RunData, run_dir: Path, processes: Processes,
           state: TrainState | None = None, optimizer: torch.optim.Optimizer | None = None,
           unknown: dict[str, int] | None = None) -> TrainState:
    """Train with rank 0 writing the run (the others silent); then write its summary."""
    callbacks = RunWriter(run_dir, config.train.tensorboard) if processes.is_main else TrainCallbacks()
    trainer = Trainer(config, model, data, processes.device, callbacks, state, optimizer, processes)
    if trainer.state.batch_in_epoch >= len(trainer.batches_of_epoch(trainer.state.epoch)):
        raise NmtError(f"{run_dir / 'last.safetensors'}: its training state does not fit the run's data")
    distributed.seed_rank(processes, config.train.seed, trainer.state.step)
    start = time.time()
    state = trainer.run()
    if processes.is_main:
        write_summary(run_dir, config, data, trainer, processes.device, time.time() - start, unknown)
    return state


def write_summary(run_dir: Path, config: RunConfig, data: RunData, trainer: Trainer,
                  device: torch.device, wall_s: float, unknown: dict[str, int] | None = None) -> None:
    """run.json: what a model card needs, beside the checkpoints (and a fine-tuned run's
    parent, with the tokens of its new data that the parent had no row for), and which weights
    are the run's default: the end's average where it scored better on validation than best."""
    s, m = trainer.state, data.manifest
    before = summary_of(run_dir)
    summary = {
        "nmt_version": __version__, "corpus": m.corpus,
        "pairs": {**m.pairs, "skipped": sum(m.pairs["skipped"].values())},
        "held_out_overlap": m.held_out_overlap,
        "parameters": count_parameters(trainer.model), "vocab_size": data.tokenizer.vocab_size,
        "steps": s.step, "epochs_completed": s.epoch, "train_seconds": round(s.elapsed, 1),
        "wall_seconds": round(wall_s, 1), "budget": config.train.budget_text(),
        "stopped_by": trainer.stop_reason or "the budget", "best_valid_bleu": s.best_bleu,
        "best_step": s.best_bleu_step,
        "train_tokens_per_s": round(s.target_tokens / max(s.step_seconds, 1e-9), 1),
        "train_sentences_per_s": round(s.sentences / max(s.step_seconds, 1e-9), 1),
        "device": describe(device), "precision": trainer.precision,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "sentencepiece": sentencepiece.__version__, "sacrebleu": sacrebleu.__version__},
    }
    # an earlier session's average stands while its file does (a resume stopped by a signal makes none)
    average = trainer.average or (before.get("averaged") if (run_dir / "averaged.safetensors").is_file() else None)
    if isinstance(average, dict) and isinstance(average.get("valid_bleu"), (int, float)):
        summary["averaged"] = average
    summary["default_weights"] = "averaged" if "averaged" in summary and average["valid_bleu"] > s.best_bleu \
        else "best"
    if config.train.init_from:
        summary["init_from"] = {"run": config.train.init_from, "unknown_tokens": unknown}
        if unknown is None:  # a resume keeps the first count
            summary["init_from"] = before.get("init_from", summary["init_from"])
    atomic_write_text(run_dir / "run.json", json.dumps(summary, indent=2) + "\n")

