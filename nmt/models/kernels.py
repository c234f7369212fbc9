"""One switch for the hand-written CPU fast paths: ``kernels: fast | reference``.

``fast`` (the default) runs:

- on CPU outside autocast (:func:`bptt_runs`), the encoder's GRU in training and the
  input-feeding decoder's teacher-forced pass with additive attention, both with a
  hand-written backward through time (:mod:`nmt.models.rnn.bptt`);
- elsewhere, the decoders' teacher-forced pass cell by cell with the embeddings' share of
  the input projection one matmul for all steps (:mod:`nmt.models.rnn.decoders`);
- additive attention's tanh as 2σ(2x) - 1 with a recomputing backward (:mod:`nmt.models.attention`);
- the output projection fused with the label-smoothed loss, exp unshifted where that is
  provably safe (:mod:`nmt.models.loss`);
- on CPU, greedy search's certified int8 argmax and the block-wise top-k (:mod:`nmt.inference.argmax`).

``reference`` runs the same model as plain PyTorch: ``nn.GRU`` (the decoder steps it once per
target position, as decoding does), ``torch.tanh``, ``F.cross_entropy`` over the generator's
logits, ``max``/``topk``, all under autograd. Both train to the same weights up to float32
rounding and decode the same output (``tests/models/test_kernels.py``); the reference is what a
change to a fast path is checked against.
"""
from __future__ import annotations

import torch
from torch import nn

from nmt.errors import NmtError

KERNELS = ("fast", "reference")


def bptt_runs(kernels: str, x: torch.Tensor) -> bool:
    """Whether :mod:`nmt.models.rnn.bptt`'s hand-written paths run on ``x``: asked for, on CPU, outside
    autocast (they are written for float32 and CPU's per-operator costs)."""
    return (kernels == "fast" and x.device.type == "cpu"
            and not torch.is_autocast_enabled(x.device.type))


def use_kernels(model: nn.Module, kernels: str) -> nn.Module:
    """Set every submodule's ``kernels`` (as ``model.train()`` sets ``training``); returns ``model``."""
    if kernels not in KERNELS:
        raise NmtError(f"kernels must be {' or '.join(KERNELS)}, got {kernels!r}")
    for module in model.modules():
        if hasattr(module, "kernels"):
            module.kernels = kernels
    return model
