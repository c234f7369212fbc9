"""Multi-head attention (Vaswani et al. 2017, section 3.2.2): h heads of
:func:`nmt.models.attention.scaled_dot_product` over learned projections, concatenated and
projected back. Self-attention is the same module with queries, keys and values from one
sequence."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.attention import Float32ScaledDotProduct, float32_scaled_dot_product, scaled_dot_product


class MultiHeadAttention(nn.Module):
    """``heads`` heads of size ``size // heads`` each."""

    def __init__(self, size: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        assert size % heads == 0, f"the model size {size} must be a multiple of the heads {heads}"
        self.heads = heads
        self.query_proj = nn.Linear(size, size, bias=bias)  # W_q, all heads
        self.key_proj = nn.Linear(size, size, bias=bias)  # W_k
        self.value_proj = nn.Linear(size, size, bias=bias)  # W_v
        self.out_proj = nn.Linear(size, size, bias=bias)  # W_o

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len, size) -> (batch, heads, len, size // heads)"""
        batch, length, size = x.shape
        return x.view(batch, length, self.heads, size // self.heads).transpose(1, 2)

    def project_keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``memory`` (batch, len, size), per head: each (batch, heads, len,
        size // heads), contiguous. Encoder-decoder attention projects them once per batch, and
        its products then read them in place: as views of the projections, every decoding step
        copied them (6% of greedy search's time). In search in bf16 on CPU they are float32
        (:func:`_float32_search`)."""
        keys, values = self.split(self.key_proj(memory)), self.split(self.value_proj(memory))
        if _float32_search(memory):
            return (keys.to(torch.float32, memory_format=torch.contiguous_format),
                    values.to(torch.float32, memory_format=torch.contiguous_format))
        return keys.contiguous(), values.contiguous()

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None, need_weights: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``queries`` (batch, q_len, size) to keys and values already projected
        and split (from :meth:`project_keys_values`).

        :param mask: bool, True where a query may attend a key, broadcastable to
            (batch, heads, q_len, k_len): (batch, 1, 1, k_len) for padding,
            (1, 1, q_len, k_len) for causality, or both combined; None: every key
        :param need_weights: False lets the device's fused kernel run, which keeps no weights
        :return: outputs, shape (batch, q_len, size); weights, shape (batch, heads, q_len, k_len),
            or None when not needed and not computed
        """
        context, weights = attend(self.split(self.query_proj(queries)), keys, values, mask, need_weights)
        batch, heads, length, head_size = context.shape
        merged = context.transpose(1, 2).reshape(batch, length, heads * head_size)
        return self.out_proj(merged), weights

    def attend_groups(self, queries: torch.Tensor, groups: tuple[tuple[torch.Tensor, torch.Tensor], ...]
                      ) -> torch.Tensor:
        """One query per row, each group of consecutive rows attending its own keys and values
        (rows at different positions: :meth:`nmt.models.transformer.model.TransformerState.join`),
        with one projection in and out for all rows; no weights.

        :param queries: shape (rows, 1, size) :param groups: per group, keys and values
            (group rows, heads, len, size // heads); the group rows add up to ``rows``
        :return: shape (rows, 1, size)
        """
        heads = self.split(self.query_proj(queries)).split([keys.size(0) for keys, _ in groups])
        context = torch.cat([attend(q, keys, values, None, need_weights=False)[0]
                             for q, (keys, values) in zip(heads, groups)])
        return self.out_proj(context.transpose(1, 2).reshape(queries.shape))


FUSED_DEVICES = ("cuda",)  # on CPU, float32 training and search did not gain: docs/performance.md


def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
           need_weights: bool = True, fused: bool | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`scaled_dot_product`, or torch's fused ``scaled_dot_product_attention`` (the same
    function, in one kernel that keeps no weights) when ``fused``; None: fused where the
    weights are not needed, on a device of :data:`FUSED_DEVICES`, or in search in bf16 on CPU
    (:func:`_float32_search`) for one query per sentence and head. Beam search's
    encoder-decoder attention asks with a query per beam, and there the CPU's fused kernel
    ran 2-3 times slower than the explicit products (docs/performance.md, "Beam search's
    attention"); the encoder's self-attention, a query per source position, takes them too.
    Shapes: (batch, heads, len, head_size)."""
    search = _float32_search(queries)
    if fused is None:
        one_query = queries.size(2) == 1
        fused = not need_weights and (queries.device.type in FUSED_DEVICES or (search and one_query))
    if _float32_products(queries):  # bf16 on CPU: the products in float32
        if fused:
            with torch.autocast("cpu", enabled=False):  # which would run the kernel in bf16
                context = F.scaled_dot_product_attention(queries.float(), keys.float(), values.float(),
                                                         attn_mask=mask)
            return context.to(queries.dtype), None
        if search:  # without the autograd Function's overhead
            return float32_scaled_dot_product(queries, keys, values, mask)
        return Float32ScaledDotProduct.apply(queries, keys, values, mask)
    if fused:
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask), None
    return scaled_dot_product(queries, keys, values, mask)


def _float32_products(queries: torch.Tensor) -> bool:
    """Whether attention's two products run in float32 from bfloat16 queries, keys and values:
    on CPU, in training under autocast and in search alike.

    oneDNN compiles a bfloat16 kernel per product shape. Training meets hundreds of (query
    length, key length) pairs, so it compiled and cached kernels it rarely ran again; in
    float32 it ran 5% faster, and its longest batch held less (docs/performance.md, "Over a
    whole run"). A search step's key length is a new shape at every step, so the caches that
    bound the kernels (:data:`nmt.runtime.devices.KERNEL_CACHES`) kept compiling; in float32
    the products take MKL's precompiled kernels (docs/performance.md, "Decoding with AMX").
    """
    return queries.device.type == "cpu" and queries.dtype == torch.bfloat16


def _float32_search(x: torch.Tensor) -> bool:
    """Whether attention runs in float32 without autograd from ``x``, bfloat16 queries or
    what keys and values are projected from: search on CPU in bf16. Keys and values are then
    kept in float32, cast once when projected rather than at every step, and the products
    run in torch's fused kernel unless the weights are wanted: at a decoding step's shapes it
    beat the explicit float32 products by 10-50% (docs/performance.md, "Packed weights")."""
    return _float32_products(x) and not torch.is_grad_enabled()


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """True where query i may see key j (j <= i): shape (length, length)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()
