"""Sinusoidal positional encoding (d2l.ai, "Self-Attention and Positional Encoding"), from the
table the Transformer adds to its embeddings (:func:`sinusoids`).

Column pairs (2j, 2j + 1) hold sin and cos of i * w_j, w_j = 1 / 10000^(2j/d): frequencies
fall along the dimension, as the bits of a binary count alternate more slowly from the lowest
to the highest. And a fixed offset d is a linear map of each pair, the same for every position:
(sin, cos) at i + d is the rotation [[cos dw, sin dw], [-sin dw, cos dw]] of (sin, cos) at i.
"""
from __future__ import annotations

import math

import torch

from nmt.demos.outcome import DemoOptions, Outcome
from nmt.models.transformer.positional import sinusoids
from nmt.report.panels import Curves, Heatmap, Series

POSITIONS, SIZE = 60, 32
COLUMNS = (6, 7, 8, 9)
OFFSETS = (1, 2, 5, 10, 20)


def rotation_error(table: torch.Tensor, offsets: tuple[int, ...] = OFFSETS) -> float:
    """The largest |P[i + d, pair] - R(d w_j) P[i, pair]| over positions, pairs and offsets d."""
    size = table.size(1)
    p = table.double()
    worst = 0.0
    for d in offsets:
        for j in range(size // 2):
            angle = d / 10000 ** (2 * j / size)
            rotation = torch.tensor([[math.cos(angle), math.sin(angle)], [-math.sin(angle), math.cos(angle)]],
                                    dtype=torch.float64)
            moved = p[:-d, 2 * j:2 * j + 2] @ rotation.T  # each row: R (sin, cos)
            worst = max(worst, float((p[d:, 2 * j:2 * j + 2] - moved).abs().max()))
    return worst


def binary(count: int = 8, bits: int = 3) -> torch.Tensor:
    """The binary representations of 0..count-1, a row each, the lowest (fastest-changing) bit
    first, as the table's fastest columns come first: (count, bits)."""
    return torch.tensor([[(n >> b) & 1 for b in range(bits)] for n in range(count)], dtype=torch.float32)


def run(options: DemoOptions) -> Outcome:
    table = sinusoids(POSITIONS, SIZE)
    error = rotation_error(table)
    lines = [f"encoding table: {POSITIONS} positions x {SIZE} dimensions, values in "
             f"[{float(table.min()):.3f}, {float(table.max()):.3f}]",
             *[f"{n} in binary is {n:03b}" for n in range(8)],
             f"an offset d in {OFFSETS} as a rotation of each (sin, cos) pair: largest error {error:.2e}"]
    columns = Curves(f"columns {COLUMNS[0]}-{COLUMNS[-1]} over position", "row (position)", "value",
                     [Series(f"column {c}", range(POSITIONS), table[:, c].tolist()) for c in COLUMNS])
    whole = Heatmap("the whole table", table, "column (encoding dimension)", "row (position)", "value",
                    limits=(-1, 1), cmap="Blues")
    bits = Heatmap("binary representations of 0-7", binary(), "bit (lowest first)", "number", "bit",
                   xticks=["1s", "2s", "4s"], limits=(0, 1), cmap="Blues")
    return Outcome(lines, [columns, whole, bits], "Sinusoidal positional encoding", columns=3)
