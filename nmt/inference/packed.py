"""Linear layers whose weights are packed once for oneDNN, for decoding in bfloat16 on CPU.

``F.linear`` on bfloat16 weights reorders each weight into oneDNN's blocked layout at every
call. A decoding step calls some 25 linear layers on a few rows each, so the reorder costs
more than the product: packed once, with the feed-forward's ReLU fused into it, a 16-row
256 -> 1,024 product took 33 us instead of 57 us, with the same outputs (``benchmarks/decoding_kernels.py``; docs/performance.md, "Packed weights").
Decoding only: the packed copy is neither trained nor saved.
"""
from __future__ import annotations

import torch
from torch import nn

from nmt.models.transformer.layers import FeedForward


def packing_available(dtype: torch.dtype) -> bool:
    """Whether this torch and CPU can pack weights of ``dtype`` for oneDNN."""
    mkldnn = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_reorder_linear_weight")
            and hasattr(mkldnn, "_linear_pointwise")):
        return False
    return dtype != torch.bfloat16 or bool(mkldnn._is_mkldnn_bf16_supported())


class PackedLinear(nn.Module):
    """``activation(x W^T + b)`` from a copy of ``linear``'s weight in oneDNN's layout;
    ``weight`` and ``bias`` stay the layer's own (a tied embedding still shares them)."""

    def __init__(self, linear: nn.Linear, activation: str = "none") -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.activation = activation  # oneDNN's post-op: "none" or "relu"
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:param x: shape (..., in_features) :return: shape (..., out_features)"""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, self.activation, [], "")


class PackedFeedForward(nn.Module):
    """A :class:`FeedForward` without dropout, its ReLU fused into the inner product."""

    def __init__(self, ff: FeedForward) -> None:
        super().__init__()
        self.inner, self.outer = PackedLinear(ff.inner, "relu"), PackedLinear(ff.outer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:param x: shape (..., size) :return: the same shape"""
        return self.outer(self.inner(x))


def pack_linears(model: nn.Module) -> nn.Module:
    """``model`` (in eval mode, for decoding) with each linear layer and feed-forward replaced
    by its packed form, in place."""
    assert not model.training, "packed layers have no dropout and no backward: decoding only"
    for name, child in model.named_children():
        if isinstance(child, FeedForward):
            setattr(model, name, PackedFeedForward(child))
        elif type(child) is nn.Linear:
            setattr(model, name, PackedLinear(child))
        else:
            pack_linears(child)
    return model
