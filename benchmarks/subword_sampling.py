"""What subword sampling costs a training step: the time to draw a batch's segmentations
(sampled from each pair's stored text, or read as stored), against the step they feed, and
how many more pieces the sampled segmentations have.

    python benchmarks/subword_sampling.py --data DATA [--batches 200] [--alphas 0.1,0.2,0.5]
                                          [--nbest 8,16,64] [--step-seconds S]

DATA is a directory ``nmt prepare`` wrote. Batches are those of ``nmt train``'s first epoch
(128 sentences, length-bucketed). ``--step-seconds`` is the measured time of one training step
on this machine (``nmt bench``), to put the drawing time in proportion; drawing runs in the
training process, before the step's forward pass. One thread: run it alone on the machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt.data.batching import bucket_batches  # noqa: E402
from nmt.data.prepare import open_run_data  # noqa: E402
from nmt.data.segmentation import TrainingPairs  # noqa: E402


def timed(pairs: TrainingPairs, batches: list[list[int]]) -> tuple[float, int]:
    """Milliseconds a batch takes to draw, and the pieces drawn in all."""
    start, pieces = time.perf_counter(), 0
    for step, index in enumerate(batches, start=1):
        src, tgt = pairs.draw(index, step)
        pieces += sum(map(len, src)) + sum(map(len, tgt))
    return (time.perf_counter() - start) / len(batches) * 1000, pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--alphas", default="0.1,0.2,0.5")
    parser.add_argument("--nbest", default="8,16,64")
    parser.add_argument("--step-seconds", type=float, help="a training step's time here, for the share")
    args = parser.parse_args()
    data = open_run_data(args.data)
    src_lens, tgt_lens = data.train_src.lengths(), data.train_tgt.lengths()
    plan = bucket_batches(src_lens, tgt_lens, 128, None, np.random.default_rng(1))
    batches = [plan[k] for k in range(min(args.batches, len(plan)))]
    stored_ms, stored_pieces = timed(TrainingPairs(data), batches)
    print(f"{'segmentation':<24} {'ms a batch':>10} {'pieces':>8}" + ("  share of a step" if args.step_seconds else ""))
    print(f"{'stored (best)':<24} {stored_ms:>10.2f} {1:>8.3f}")
    for nbest in map(int, args.nbest.split(",")):
        for alpha in map(float, args.alphas.split(",")):
            ms, pieces = timed(TrainingPairs(data, alpha, nbest, max_pieces=data.manifest.settings["max_pieces"]),
                               batches)
            share = f"  {(ms - stored_ms) / 10 / args.step_seconds:.2f}%" if args.step_seconds else ""
            print(f"{f'alpha {alpha:g}, nbest {nbest}':<24} {ms:>10.2f} {pieces / stored_pieces:>8.3f}{share}")


if __name__ == "__main__":
    main()
