"""Multi-head attention (d2l.ai, "Multi-Head Attention"), with the Transformer's own
:class:`MultiHeadAttention`: the chapter's shape check, then what each head of a randomly
initialised layer attends to on a toy sequence (each head its own projections, so its own
pattern; the masked keys get none)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.demos.outcome import DemoOptions, Outcome
from nmt.models.masks import lengths_to_mask
from nmt.models.transformer.multihead import MultiHeadAttention
from nmt.models.transformer.positional import sinusoids
from nmt.report.panels import Heatmap

SIZE, HEADS, QUERIES, KEYS = 100, 5, 4, 6
VALID_LENGTHS = (3, 2)
TOY_LENGTH, TOY_VALID = 8, 6


@dataclass(frozen=True)
class Heads:
    """The shape check's output and weights, (2, 4, 100) and (2, 5, 4, 6); the toy's weights,
    (heads, 8, 8), over a sequence of 8 with 6 valid."""

    output: torch.Tensor
    weights: torch.Tensor
    toy: torch.Tensor


@torch.no_grad()
def attend(seed: int = 0) -> Heads:
    torch.manual_seed(seed)
    attention = MultiHeadAttention(SIZE, HEADS).eval()
    x, y = torch.ones(2, QUERIES, SIZE), torch.ones(2, KEYS, SIZE)
    mask = lengths_to_mask(torch.tensor(VALID_LENGTHS), KEYS).view(2, 1, 1, KEYS)
    output, weights = attention(x, *attention.project_keys_values(y), mask)
    # A toy sequence whose items differ: random vectors plus their positions' encodings.
    generator = torch.Generator().manual_seed(seed)
    sequence = torch.randn(1, TOY_LENGTH, SIZE, generator=generator) + 3 * sinusoids(TOY_LENGTH, SIZE)
    toy_mask = lengths_to_mask(torch.tensor([TOY_VALID]), TOY_LENGTH).view(1, 1, 1, TOY_LENGTH)
    _, toy = attention(sequence, *attention.project_keys_values(sequence), toy_mask)
    return Heads(output, weights, toy[0])


def run(options: DemoOptions) -> Outcome:
    h = attend(options.seed)
    strongest = h.toy.argmax(-1)  # (heads, queries)
    lines = [f"queries (2, {QUERIES}, {SIZE}), keys and values (2, {KEYS}, {SIZE}), {HEADS} heads, valid "
             f"lengths {VALID_LENGTHS}: output {tuple(h.output.shape)}, weights {tuple(h.weights.shape)}",
             f"weights on masked keys: max {float(h.weights[0, ..., 3:].abs().max()):.1f} (sentence 1), "
             f"{float(h.weights[1, ..., 2:].abs().max()):.1f} (sentence 2)",
             f"toy self-attention over {TOY_LENGTH} positions ({TOY_VALID} valid), the key each query "
             f"attends to most, per head:"]
    lines += [f"head {k + 1}: " + " ".join(str(int(j)) for j in row) for k, row in enumerate(strongest)]
    panels = [Heatmap(f"head {k + 1} of {HEADS}", weights, "key position", "query position", "weight",
                      limits=(0, 1)) for k, weights in enumerate(h.toy)]
    return Outcome(lines, panels, f"Multi-head self-attention: {HEADS} heads of one layer on a toy sequence of "
                   f"{TOY_LENGTH} ({TOY_VALID} valid; the last 2 masked)", columns=3)
