"""The output layer padded to a multiple of 16 outputs, for decoding in float32 on CPU.

MKL's float32 product runs at about half its speed when the output's width is not a multiple
of 16: 640 rows (beam 5 of 128 sentences) through 256 -> 4,153 took 26-30 ms, through 256 ->
4,160 15 ms (docs/performance.md, "The output layer's width"). The padded copy's extra rows
are zeros and its product's first columns are the layer's logits, up to float32 rounding
(MKL sums some shapes in another order): a view of them, so nothing downstream sees the
padding. Decoding only: the copy is neither trained nor saved, and it is built once, from the
weights as loaded.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MULTIPLE = 16


class PaddedLinear(nn.Linear):
    """``linear`` (its own ``weight`` and ``bias``, a tied embedding's included) computed
    through a copy whose output width is a multiple of :data:`MULTIPLE`."""

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)
        self.train(linear.training)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        extra = -self.out_features % MULTIPLE
        self.register_buffer("padded_weight", F.pad(linear.weight.detach(), (0, 0, 0, extra)), persistent=False)
        padded_bias = None if linear.bias is None else F.pad(linear.bias.detach(), (0, extra))
        self.register_buffer("padded_bias", padded_bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:param x: shape (..., in_features) :return: shape (..., out_features), a view"""
        return F.linear(x, self.padded_weight, self.padded_bias)[..., :self.out_features]


def pad_output_layer(model: nn.Module) -> nn.Module:
    """``model`` (in eval mode, for decoding) with its generator's output layer padded, in
    place, where its width is not already a multiple of :data:`MULTIPLE`."""
    assert not model.training, "the padded copy follows no update: decoding only"
    generator = getattr(model, "generator", None)
    proj = getattr(generator, "proj", None)
    if type(proj) is nn.Linear and proj.out_features % MULTIPLE:
        generator.proj = PaddedLinear(proj)
    return model
