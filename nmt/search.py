"""Decoding: batched greedy search over ``Seq2Seq.encode`` / ``decoder.step``."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.model import Seq2Seq
from nmt.tokenizer import BOS_ID, EOS_ID


@dataclass
class Hypothesis:
    """One decoded sentence: piece ids without BOS/EOS, its log-probability, and its attention,
    shape (generated, src_len) — one row per generated piece, EOS included when generated."""

    tokens: list[int]
    score: float
    attention: torch.Tensor


def max_output_lengths(src_len: torch.Tensor, ratio: float, extra: int, cap: int) -> torch.Tensor:
    """Per-sentence output budget ``ratio * src_len + extra``, at most ``cap``; shape (batch,)."""
    return torch.clamp((src_len.float() * ratio).long() + extra, max=cap)


@torch.inference_mode()
def greedy_search(model: Seq2Seq, src: torch.Tensor, src_len: torch.Tensor,
                  max_len: torch.Tensor) -> list[Hypothesis]:
    """Pick the most likely piece at every step until EOS or the sentence's length budget.

    :param src: shape (batch, src_len); :param src_len: shape (batch,)
    :param max_len: most pieces to generate per sentence (EOS included), shape (batch,)
    """
    batch = src.size(0)
    state = model.encode(src, src_len)
    prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    out_len = torch.zeros(batch, dtype=torch.long, device=src.device)  # pieces kept, EOS included
    max_len = max_len.to(src.device)
    tokens, weights, scores = [], [], torch.zeros(batch, device=src.device)
    for step in range(int(max_len.max())):
        output, state, attn = model.decoder.step(prev, state)
        log_probs = torch.log_softmax(model.generator(output).float(), dim=-1)  # (batch, vocab)
        best, prev = log_probs.max(dim=-1)
        scores += best.masked_fill(done, 0.0)
        tokens.append(prev)
        weights.append(attn)
        finished = ~done & ((prev == EOS_ID) | (step + 1 >= max_len))
        out_len = out_len.masked_fill(finished, step + 1)
        done |= finished
        if bool(done.all()):
            break
    return _collect(torch.stack(tokens, 1).tolist(), torch.stack(weights, 1), scores.tolist(),
                    out_len.tolist(), src_len.tolist())


def _collect(rows: list[list[int]], weights: torch.Tensor, scores: list[float],
             out_len: list[int], src_len: list[int]) -> list[Hypothesis]:
    hyps = []
    for row, attn, score, n, n_src in zip(rows, weights, scores, out_len, src_len):
        pieces = row[:n - 1] if row[n - 1] == EOS_ID else row[:n]
        hyps.append(Hypothesis(pieces, score, attn[:n, :n_src].float().cpu()))
    return hyps
