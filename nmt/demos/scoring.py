"""Attention scoring functions (d2l.ai, "Attention Scoring Functions"), on the chapter's toy
tensors, with the functions and classes nmt's models use: :func:`masked_softmax`,
:class:`AdditiveAttention` (Bahdanau) and :class:`DotProductAttention` (scaled dot product)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.demos.outcome import DemoOptions, Outcome
from nmt.models.attention import AdditiveAttention, DotProductAttention, masked_softmax
from nmt.models.masks import lengths_to_mask
from nmt.report.panels import Heatmap

KEYS, KEY_SIZE, VALUE_SIZE = 10, 2, 4
VALID_LENGTHS = (2, 6)


@dataclass(frozen=True)
class Scores:
    """Masked softmax weights, (2, 2, 4), with a valid length per sentence (2, 3) and per row
    ((1, 3), (2, 4)); additive and dot-product weights, (2, 10), and contexts, (2, 4), of the
    toy queries over 10 keys of which (2, 6) are valid."""

    by_sentence: torch.Tensor
    by_row: torch.Tensor
    weights: dict[str, torch.Tensor]
    contexts: dict[str, torch.Tensor]


@torch.no_grad()
def score(seed: int = 0) -> Scores:
    generator = torch.Generator().manual_seed(seed)
    raw = torch.rand(2, 2, 4, generator=generator)
    by_sentence = masked_softmax(raw, lengths_to_mask(torch.tensor([2, 3]), 4).unsqueeze(1))
    by_row = masked_softmax(raw, lengths_to_mask(torch.tensor([1, 3, 2, 4]), 4).view(2, 2, 4))
    keys = torch.normal(0, 1, (2, KEYS, KEY_SIZE), generator=generator)
    values = torch.arange(KEYS * VALUE_SIZE, dtype=torch.float32).reshape(1, KEYS, VALUE_SIZE).repeat(2, 1, 1)
    mask = lengths_to_mask(torch.tensor(VALID_LENGTHS), KEYS)
    torch.manual_seed(seed)  # the additive attention's initial weights
    additive = AdditiveAttention(key_size=KEY_SIZE, query_size=20, attn_size=8).eval()
    queries = {"additive": torch.normal(0, 1, (2, 20), generator=generator),
               "dot product": torch.normal(0, 1, (2, KEY_SIZE), generator=generator)}
    weights, contexts = {}, {}
    for name, attention in (("additive", additive), ("dot product", DotProductAttention())):
        contexts[name], weights[name] = attention(queries[name], attention.project_keys(keys), values, mask)
    return Scores(by_sentence, by_row, weights, contexts)


def _rows(t: torch.Tensor) -> list[str]:
    return [" ".join(f"{w:.4f}" for w in row) for row in t.reshape(-1, t.size(-1)).tolist()]


def run(options: DemoOptions) -> Outcome:
    s = score(options.seed)
    lines = ["masked softmax of random (2, 2, 4) scores, valid lengths (2, 3):", *_rows(s.by_sentence),
             "the same, valid lengths per row ((1, 3), (2, 4)):", *_rows(s.by_row)]
    for name in s.weights:
        w, c = s.weights[name], s.contexts[name]
        masked = torch.cat([w[i, n:] for i, n in enumerate(VALID_LENGTHS)])
        lines += [f"{name} attention: queries {'(2, 20)' if name == 'additive' else '(2, 2)'}, keys (2, {KEYS}, "
                  f"{KEY_SIZE}), values (2, {KEYS}, {VALUE_SIZE}), valid lengths {VALID_LENGTHS}: context "
                  f"{tuple(c.shape)}, weights {tuple(w.shape)}; weights on masked keys: "
                  f"{'all exactly 0' if bool((masked == 0).all()) else 'NOT 0'}", *_rows(w)]
    panels = [Heatmap("masked softmax, valid lengths (2, 3)", s.by_sentence.reshape(4, 4), "position",
                      "sentence, row", "weight", yticks=["1, 1", "1, 2", "2, 1", "2, 2"], limits=(0, 1)),
              Heatmap("masked softmax, valid lengths per row", s.by_row.reshape(4, 4), "position",
                      "sentence, row", "weight", yticks=["1, 1 (1)", "1, 2 (3)", "2, 1 (2)", "2, 2 (4)"],
                      limits=(0, 1))]
    panels += [Heatmap(f"{name} attention, valid lengths {VALID_LENGTHS}", w, "key", "query (one a sentence)",
                       "weight", yticks=[f"sentence {i + 1}" for i in range(2)], limits=(0, 1))
               for name, w in s.weights.items()]
    return Outcome(lines, panels, "Attention scoring: masked softmax, additive and scaled dot-product", columns=2)
