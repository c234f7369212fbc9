"""Per-call time of a decoding step's kernels on CPU: linear layers as ``F.linear`` computes
them against weights packed once for oneDNN (``nmt/inference/packed.py``), and attention as
explicit float32 products against torch's fused kernel, beam search's choice of
continuations (``nmt/inference/argmax.py``'s ``beam_topk`` against the full sum's top-k), and
the float32 output layer at odd widths against its copy padded to a multiple of 16
(``nmt/inference/padded.py``).

    python benchmarks/decoding_kernels.py [--threads 2] [--calls 500]

Shapes are the Transformer reference size's (d_model 256, feed-forward 1,024, 4 heads) at a
search step's row counts; attention with one query per row (greedy search, self-attention)
and with five (beam 5's encoder-decoder attention, a sentence's beams querying its source).
bf16 rows are printed only on a CPU that computes bf16 natively.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nmt.inference.argmax import beam_topk, row_topk
from nmt.inference.packed import PackedLinear, packing_available
from nmt.inference.padded import PaddedLinear
from nmt.models.attention import float32_scaled_dot_product


def per_call_us(fn, calls: int) -> float:
    for _ in range(calls // 10):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def linears(dtype: torch.dtype, calls: int) -> None:
    print(f"linear layers, {str(dtype).removeprefix('torch.')}, us per call: F.linear / packed")
    for rows in (16, 128):
        for inputs, outputs in ((256, 256), (256, 1024), (1024, 256)):
            layer = torch.nn.Linear(inputs, outputs).to(dtype)
            x = torch.randn(rows, 1, inputs, dtype=dtype)
            packed_layer = PackedLinear(layer)
            plain = per_call_us(lambda: F.linear(x, layer.weight, layer.bias), calls)
            packed = per_call_us(lambda: packed_layer(x), calls)
            line = f"  {rows:3d} x {inputs} -> {outputs}: {plain:6.1f} / {packed:6.1f}"
            if inputs < outputs:  # the feed-forward's inner layer, with its ReLU
                fused = PackedLinear(layer, "relu")
                unfused = per_call_us(lambda: F.linear(x, layer.weight, layer.bias).relu(), calls)
                line += f"   with ReLU {unfused:6.1f} / {per_call_us(lambda: fused(x), calls):6.1f}"
            print(line)


def attention(calls: int) -> None:
    print("attention of bf16 queries over float32 keys and values, us per call:\n"
          "  keys cast each call, explicit / keys float32, explicit / keys float32, fused")
    for queries in (1, 5):  # greedy search's one query per row; beam 5's encoder-decoder attention
        for rows in (16, 128):
            for keys in (5, 15, 30):
                q = torch.randn(rows, 4, queries, 64).bfloat16()
                k, v = torch.randn(rows, 4, keys, 64).bfloat16(), torch.randn(rows, 4, keys, 64).bfloat16()
                kf, vf = k.float(), v.float()
                mask = torch.ones(rows, 1, 1, keys, dtype=torch.bool)
                mask[::3, ..., keys - 3:] = False
                cast = per_call_us(lambda: float32_scaled_dot_product(q, k, v, mask), calls)
                explicit = per_call_us(lambda: float32_scaled_dot_product(q, kf, vf, mask), calls)
                fused = per_call_us(lambda: F.scaled_dot_product_attention(q.float(), kf, vf, attn_mask=mask)
                                    .bfloat16(), calls)
                print(f"  {rows:3d} rows x {queries} queries, {keys:2d} keys: "
                      f"{cast:6.1f} / {explicit:6.1f} / {fused:6.1f}")


def beam_choice(calls: int) -> None:
    print("beam 5's choice of 10 candidates a sentence, us per call:\n"
          "  the log-softmax before it / the full sum, then its top-k / the top-k without the sum")
    for sentences in (16, 128):
        for vocab in (5648, 8000):
            log_probs = torch.log_softmax(3 * torch.randn(sentences * 5, vocab), dim=1)
            scores = -10 * torch.rand(sentences, 5)
            softmax = per_call_us(lambda: torch.log_softmax(log_probs, dim=1), calls)
            summed = per_call_us(lambda: row_topk((scores.view(-1, 1) + log_probs).view(sentences, -1), 10),
                                 calls)
            print(f"  {sentences:3d} sentences x 5 beams, {vocab} pieces: "
                  f"{softmax:7.1f} / {summed:7.1f} / {per_call_us(lambda: beam_topk(log_probs, scores, 10), calls):7.1f}")


def output_widths(calls: int) -> None:
    print("the float32 output layer, 256 -> pieces, us per call: F.linear / padded to a multiple of 16")
    for rows in (16, 128, 640):  # 640: beam 5 of 128 sentences
        line = f"  {rows:3d} rows:"
        for pieces in (4153, 5649, 8001):
            layer = torch.nn.Linear(256, pieces)
            padded, x = PaddedLinear(layer), torch.randn(rows, 256)
            plain_us, padded_us = per_call_us(lambda: layer(x), calls), per_call_us(lambda: padded(x), calls)
            line += f"   {pieces}: {plain_us:7.1f} / {padded_us:7.1f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        for dtype in (torch.float32, torch.bfloat16):
            if packing_available(dtype):
                linears(dtype, args.calls)
        attention(args.calls)
        beam_choice(args.calls)
        output_widths(args.calls)


if __name__ == "__main__":
    main()
