"""Peak heap and time of the training loss: nmt's fused, sliced loss against plain PyTorch.

    python benchmarks/loss_memory.py [--tokens 4000] [--vocab 8000,32000] [--repeats 3]

For each vocabulary and precision (fp32; bf16 autocast where the CPU computes it natively),
runs the output projection and label-smoothed cross-entropy forward and backward over
``--tokens`` random decoder outputs of d_model 256, as one training step's loss does, and
prints the peak of the heap in use above its level before the call and the median time, for
nmt's loss (``nmt.models.loss.masked_cross_entropy``) and for the plain PyTorch one
(``F.cross_entropy`` of the projection, what ``--kernels reference`` runs). The heap is read
with glibc's ``mallinfo2``, sampled every half millisecond in a thread: Linux with glibc only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nmt.models.generator import Generator  # noqa: E402
from nmt.models.loss import masked_cross_entropy  # noqa: E402
from nmt.runtime.allocator import heap_in_use  # noqa: E402
from nmt.runtime.precision import cpu_bf16_flags  # noqa: E402
from nmt.tools.bench import PeakRSS  # noqa: E402


def measure(generator: Generator, outputs: torch.Tensor, gold: torch.Tensor, precision: str,
            repeats: int) -> tuple[float, float]:
    """(peak heap MB above the start, median seconds) of the loss forward and backward."""
    mask = torch.ones(gold.shape, dtype=torch.bool)
    peaks, times = [], []
    for _ in range(repeats + 1):  # the first warms up
        x = outputs.clone().requires_grad_(True)
        generator.zero_grad(set_to_none=True)
        with PeakRSS(interval=0.0005, read=heap_in_use) as heap:
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = masked_cross_entropy(generator, x, gold, mask, label_smoothing=0.1)
            loss.backward()
            seconds = time.perf_counter() - start
        peaks.append((heap.peak - heap.start) / 2**20)
        times.append(seconds)
        del loss, x
    return max(peaks[1:]), statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4000, help="real target tokens in the batch")
    parser.add_argument("--vocab", default="8000,32000", help="output vocabulary sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    precisions = ["fp32"] + (["bf16"] if cpu_bf16_flags() else [])
    torch.manual_seed(0)
    print(f"{args.tokens} tokens, d_model 256, label smoothing 0.1; peak heap above the start, median time")
    print(f"{'vocab':>7} {'precision':>9} {'nmt MB':>8} {'nmt s':>7} {'PyTorch MB':>11} {'PyTorch s':>10}")
    for vocab in (int(v) for v in args.vocab.split(",")):
        generator = Generator(256, vocab, dropout=0.0)
        with torch.no_grad():
            generator.proj.weight.normal_(0, 0.05)
        outputs = torch.randn(1, args.tokens, 256) * 0.5
        gold = torch.randint(0, vocab, (1, args.tokens))
        for precision in precisions:
            figures = []
            for kernels in ("fast", "reference"):
                generator.kernels = kernels
                figures += measure(generator, outputs, gold, precision, args.repeats)
            print(f"{vocab:>7} {precision:>9} {figures[0]:>8.0f} {figures[1]:>7.3f} {figures[2]:>11.0f} {figures[3]:>10.3f}")


if __name__ == "__main__":
    main()
