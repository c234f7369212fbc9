"""``nmt bench``: training and translation throughput and peak memory, measured on real data.

Training is timed over ``steps`` optimiser steps after ``warmup`` untimed ones, on
length-bucketed batches of the corpus (or a random slice of it). Translation is timed from
raw text to detokenised text with a trained run (model loading excluded). Peak RSS is
sampled every 10 ms in each phase separately.
"""
from __future__ import annotations

import dataclasses
import functools
import platform
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt import __version__
from nmt.config import RunConfig
from nmt.data.batching import Batch, make_batch, padded_pieces
from nmt.data.prepare import prepare_run_data
from nmt.data.tokenizer import PAD_ID
from nmt.inference.quantize import load_for_decoding
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY, SearchOptions
from nmt.inference.translate import Translator
from nmt.models.build import build_model, count_parameters
from nmt.models.build import describe as describe_model
from nmt.models.kernels import use_kernels
from nmt.runtime.devices import configure_cpu, describe, pick_device, synchronize
from nmt.runtime.precision import resolve
from nmt.tools.flops import matmul_peak_flops, training_flops
from nmt.training.callbacks import TrainCallbacks
from nmt.training.trainer import Trainer


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRSS:
    """Samples the process's resident memory (or another byte count, ``read``) in a thread;
    ``start`` is the count on entry, ``peak`` the highest seen."""

    def __init__(self, interval: float = 0.01, read: Callable[[], int] = _rss_bytes) -> None:
        self.interval, self.read, self.start, self.peak = interval, read, 0, 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = self.read()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.read())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())


@dataclass
class BenchResult:
    settings: dict[str, Any]
    train: dict[str, float] = field(default_factory=dict)
    translate: dict[str, dict[str, float]] = field(default_factory=dict)


def bench_training(config: RunConfig, pairs: int | None, steps: int, warmup: int, device: torch.device
                   ) -> tuple[dict[str, float], Callable[[], dict[str, float]]]:
    """Train a fresh model of ``config``'s size on ``pairs`` random corpus pairs (all if None),
    bucketed as ``nmt train`` buckets them; time it. The second warm-up step runs the epoch's
    largest batch, once the optimiser's state exists, so that the peak RSS includes the step
    that a whole epoch peaks in.

    :return: the figures; a call that counts the timed steps' matmul FLOPs (see
        :mod:`nmt.tools.flops`) and compares their rate with the device's matmul peak
    """
    data_cfg = dataclasses.replace(config.data, valid_size=0, test_size=0)
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_run_data(data_cfg, Path(tmp), corpus_limit=pairs)
        config = data.sized(config.for_corpus(len(data.train_src)))
        torch.manual_seed(config.train.seed)
        model = build_model(config.model, PAD_ID, *data.rows(config)).to(device)
        trainer = Trainer(config, model, data, device, TrainCallbacks())
        batches = list(trainer.batches_of_epoch(0))
        if warmup:  # second where it can be: the first step creates Adam's state, held ever after
            batches.insert(min(1, warmup - 1), _largest(batches, trainer.src_lens, trainer.tgt_lens))
        while len(batches) < warmup + steps:
            batches += list(trainer.batches_of_epoch(len(batches)))
        with PeakRSS() as rss:
            for k, index in enumerate(batches[:warmup + steps]):
                if k == warmup:
                    synchronize(device)
                    start = time.perf_counter()
                trainer.train_step([index])  # makes the batch, as nmt train does
            synchronize(device)
            seconds = time.perf_counter() - start
        timed = [make_batch([data.train_src[i] for i in index], [data.train_tgt[i] for i in index])
                 for index in batches[warmup:warmup + steps]]
    # Counted after the translation phases, so that no phase's peak RSS includes the count's
    # memory; the piece ids go as tensors (holding the lists' int objects kept 70 MB alive).
    count = functools.partial(_efficiency, config, *map(torch.tensor, data.rows(config)), timed, seconds, device)
    sentences = sum(b.src.size(0) for b in timed)
    src_pieces = sum(int(b.src_len.sum()) for b in timed)
    tgt_pieces = sum(b.n_tokens for b in timed)
    padded = sum(b.src.numel() + b.tgt_out.numel() for b in timed)
    return {"parameters": count_parameters(model), "vocab": data.tokenizer.vocab_size,
            "output_pieces": config.model.target_pieces,
            "steps": steps, "seconds": round(seconds, 2),
            "sentences_per_s": round(sentences / seconds, 1),
            "target_pieces_per_s": round(tgt_pieces / seconds, 1),
            "pieces_per_s": round((src_pieces + tgt_pieces) / seconds, 1),
            "padding_fraction": round(1 - (src_pieces + tgt_pieces) / padded, 4),
            "peak_rss_mb": round(rss.peak / 2**20, 1)}, count


def _largest(batches: list[list[int]], src_lens: np.ndarray, tgt_lens: np.ndarray) -> list[int]:
    """The batch with the most padded pieces, source and target."""
    return max(batches, key=lambda index: padded_pieces(index, src_lens, tgt_lens))


def _efficiency(config: RunConfig, source_pieces: torch.Tensor, target_pieces: torch.Tensor,
                batches: list[Batch], seconds: float, device: torch.device) -> dict[str, float]:
    """The timed steps' matmul FLOPs, their rate, and its fraction of the device's matmul peak.
    Weights do not change the count, so a fresh CPU model of the same size counts them."""
    model = build_model(config.model, PAD_ID, source_pieces.tolist(), target_pieces.tolist())
    flops = training_flops(model, batches, config.train.label_smoothing)
    peak, peak_dtype = matmul_peak_flops(device, resolve(config.train.precision, device, config.model.arch))
    return {"gflop_per_step": round(flops / len(batches) / 1e9, 3), "gflops": round(flops / seconds / 1e9, 1),
            "matmul_peak_gflops": round(peak / 1e9, 1), "matmul_peak_dtype": peak_dtype,
            "peak_fraction": round(flops / seconds / peak, 3)}


def bench_translation(translator: Translator, sources: list[str], batch_size: int) -> dict[str, float]:
    """Time raw text → detokenised text for ``sources`` with the translator's search."""
    translator.translate(sources[:batch_size], batch_size)  # warm-up
    with PeakRSS() as rss:
        synchronize(translator.device)
        start = time.perf_counter()
        outputs = translator.translate(sources, batch_size)
        synchronize(translator.device)
        seconds = time.perf_counter() - start
    return {"sentences": len(sources), "workers": translator.parallel_workers(), "seconds": round(seconds, 2),
            "sentences_per_s": round(len(sources) / seconds, 1),
            "output_pieces_per_s": round(sum(len(x) for x in translator.tokenizer.encode(outputs)) / seconds, 1),
            "peak_rss_mb": round(rss.peak / 2**20, 1)}


def settings(device: torch.device) -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d"), "nmt": __version__, "torch": torch.__version__,
            "device": describe(device), "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine()}


def pick_sources(sources: list[str], n: int, seed: int = 1) -> list[str]:
    """``n`` sources (repeating if there are fewer), in a fixed shuffled order."""
    rng = random.Random(seed)
    chosen = [sources[i % len(sources)] for i in range(n)]
    rng.shuffle(chosen)
    return chosen


def translation_run(checkpoint: Path | None) -> Path | None:
    """The run to translate with: the one given, else the newest in checkpoints/, else None."""
    from nmt.errors import NmtError
    from nmt.inference.loading import latest_run

    if checkpoint is not None:
        return checkpoint
    try:
        return latest_run()
    except NmtError:
        return None


def test_sources(run: Path, sentences: int) -> list[str]:
    """``sentences`` of the run's held-out test sources, in a fixed shuffled order."""
    from nmt.inference.evaluate import run_test_set

    return pick_sources(run_test_set(run).sources, sentences)


def run_bench(config: RunConfig, pairs: int | None, steps: int, warmup: int, run: Path | None,
              sentences: int, beam: int, batch_size: int, precision: str = "fp32",
              decode_on: torch.device | None = None,
              length_penalty: float = DEFAULT_LENGTH_PENALTY) -> BenchResult:
    """All phases; the translation phases only with a trained ``run``, translating
    ``sentences`` of its test sources at ``precision`` (a ``--precision`` setting, int8
    included) on ``decode_on`` (default: the training device), beam search with GNMT
    ``length_penalty``. Training runs at the config's precision.

    The trained model is loaded after the training phase so it does not count in that peak.
    """
    configure_cpu(config.train.threads)
    device = pick_device(config.train.device)
    result = BenchResult(settings(device) | {"model": describe_model(config.model),
                                             "precision": resolve(config.train.precision, device,
                                                                  config.model.arch),
                                             "length_penalty": length_penalty,
                                             "kernels": config.train.kernels})
    result.train, efficiency = bench_training(config, pairs, steps, warmup, device)
    if run is not None:
        decode_on = decode_on or device
        model, tokenizer, precision = load_for_decoding(run, precision, decode_on)
        result.settings["translate_precision"] = precision
        texts = test_sources(run, sentences)
        for name, width in (("greedy", 1), (f"beam {beam}", beam)):
            translator = Translator(use_kernels(model, config.train.kernels), tokenizer, decode_on,
                                    SearchOptions(width, 1, length_penalty), precision=precision)
            result.translate[name] = bench_translation(translator, texts, batch_size)
    result.train |= efficiency()
    return result
