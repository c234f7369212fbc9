"""Several trained models decoding as one: at every step, the mean of the members'
log-probabilities (OpenNMT-py's ``-model A B``, fairseq's ``path1:path2``), in greedy and beam
search alike, through the one model interface (:mod:`nmt.models.interface`).

Members share one tokenizer (the caller checks its SHA-256) and may differ in everything
else: a GRU with a Transformer, other sizes, other pieces in their output layers. Each keeps
its own decoder state. The ensemble scores the pieces that every member can output (on one
corpus, all of them), so a piece some member has no row for is never chosen.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nmt.models.interface import DecoderState, TranslationModel


@dataclass(frozen=True)
class EnsembleState:
    """Each member's own decoder state, in member order."""

    members: tuple[DecoderState, ...]

    def select(self, index: torch.Tensor) -> EnsembleState:
        return EnsembleState(tuple(s.select(index) for s in self.members))

    def repeat_beams(self, beams: int) -> EnsembleState:
        return EnsembleState(tuple(s.repeat_beams(beams) for s in self.members))

    def reorder_beams(self, index: torch.Tensor) -> EnsembleState:
        return EnsembleState(tuple(s.reorder_beams(index) for s in self.members))

    def join(self, other: EnsembleState) -> EnsembleState:
        return EnsembleState(tuple(mine.join(theirs) for mine, theirs in zip(self.members, other.members)))


class _Outputs(nn.Module):
    """What search reads of an output layer: how many positions it scores."""

    def __init__(self, out_features: int) -> None:
        super().__init__()
        self.out_features = out_features


class Ensemble(nn.Module):
    """Decodes with the mean of ``members``' log-probabilities over the pieces they share.

    A step's "outputs" are already those mean log-probabilities, shape (batch, shared pieces),
    so :meth:`logits` returns them as they are; search's log-softmax then leaves a member's
    own log-probabilities unchanged when it is alone or with copies of itself.
    """

    kernels = "reference"  # no single output layer for greedy search's certified argmax

    def __init__(self, members: list[TranslationModel]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        ids = [_output_ids(m) for m in members]
        shared = sorted(set.intersection(*(set(i.tolist()) for i in ids)))
        self.register_buffer("shared_ids", torch.tensor(shared))  # (shared,), tokenizer ids
        # each member's logit position of every shared piece
        positions = [{piece: k for k, piece in enumerate(i.tolist())} for i in ids]
        self.columns = [torch.tensor([where[piece] for piece in shared]) for where in positions]
        self._output = _Outputs(len(shared))

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> EnsembleState:
        return EnsembleState(tuple(m.encode(src, src_len) for m in self.members))

    def step(self, prev_tokens: torch.Tensor, state: EnsembleState, need_attention: bool = True
             ) -> tuple[torch.Tensor, EnsembleState, torch.Tensor | None]:
        """:return: the members' mean log-probabilities of the shared pieces, (batch, shared);
        the state; the members' mean attention, (batch, src_len), if ``need_attention``"""
        log_probs, states, attention = [], [], []
        for member, columns, member_state in zip(self.members, self.columns, state.members):
            out, new_state, attn = member.step(prev_tokens, member_state, need_attention)
            logits = member.logits(out).float()
            log_probs.append(torch.log_softmax(logits, dim=-1).index_select(-1, columns.to(logits.device)))
            states.append(new_state)
            attention.append(attn)
        mean_attention = torch.stack(attention).float().mean(0) if need_attention and None not in attention else None
        return torch.stack(log_probs).mean(0), EnsembleState(tuple(states)), mean_attention

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs

    def piece_ids(self, positions: torch.Tensor) -> torch.Tensor:
        return self.shared_ids.to(positions.device)[positions]

    @property
    def output_layer(self) -> nn.Module:
        return self._output


def _output_ids(model: TranslationModel) -> torch.Tensor:
    """The tokenizer id of each of a model's logit positions."""
    device = next(model.parameters()).device
    return model.piece_ids(torch.arange(model.output_layer.out_features, device=device)).cpu()
