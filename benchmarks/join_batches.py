"""Greedy or beam search with batches joined at several thresholds, timed in one process,
taking turns: ``nmt translate``'s own path (``Translator.translate``) over a trained run.

    python benchmarks/join_batches.py RUN [--sources FILE] [--precision bf16] [--batch 128]
        [--beam 1] [--rounds 5] [--join 0 16 32 64]

``--join`` lists thresholds below ``--batch``: once no more than that many of a batch's sentences
are going, the next batch joins them (0: never; ``nmt translate`` uses half a batch). Prints each
threshold's median and range of sentences/s, and how many outputs differ from the first's.
Without ``--sources``, the run's first 1,000 test sources.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from nmt.inference.quantize import load_for_decoding
from nmt.inference.settings import SearchOptions
from nmt.inference.translate import Translator
from nmt.runtime.devices import configure_cpu
from nmt.tools.bench import test_sources


class _Joining(Translator):
    """A translator whose search joins batches at ``threshold`` going sentences."""

    def __init__(self, *args, threshold: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.threshold = threshold

    def _decode_batches(self, batches, keys, with_scores, with_attention, argmax, join_below, cancel):
        return super()._decode_batches(batches, keys, with_scores, with_attention, argmax, self.threshold, cancel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--sources", type=Path)
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16", "int8"))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--beam", type=int, default=1, help="1: greedy search (default)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--join", type=int, nargs="+", default=[0, 16, 32, 64])
    args = parser.parse_args()
    if max(args.join) >= args.batch:
        parser.error(f"--join thresholds must be below --batch {args.batch}: "
                     "at it, every step would join a batch")
    configure_cpu(0)
    device = torch.device("cpu")
    model, tokenizer, precision = load_for_decoding(args.run, args.precision, device)
    sources = args.sources.read_text().splitlines() if args.sources else test_sources(args.run, 1000)
    translators = {j: _Joining(model, tokenizer, device, SearchOptions(args.beam), precision=precision, threshold=j)
                   for j in args.join}
    for translator in translators.values():  # warm-up
        translator.translate(sources[:2 * args.batch], args.batch)
    rates: dict[int, list[float]] = {j: [] for j in args.join}
    outputs: dict[int, list[str]] = {}
    for turn in range(args.rounds):
        for j in args.join if turn % 2 == 0 else args.join[::-1]:
            start = time.perf_counter()
            outputs[j] = translators[j].translate(sources, args.batch)
            rates[j].append(len(sources) / (time.perf_counter() - start))
    first = outputs[args.join[0]]
    for j in args.join:
        differ = sum(a != b for a, b in zip(outputs[j], first))
        print(f"join at {j} going: {statistics.median(rates[j]):.1f} sentences/s (median; "
              f"{min(rates[j]):.1f}-{max(rates[j]):.1f}), "
              f"{differ} outputs differ from join at {args.join[0]}")


if __name__ == "__main__":
    main()
