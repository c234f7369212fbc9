"""How close training runs to the hardware: a step's matmul FLOPs and the machine's matmul peak.

The count is the model FLOPs of nanoGPT's MFU: matrix products only (``mm``, ``addmm``,
``bmm``, ...), forward and backward, as PyTorch's ``FlopCounterMode`` sees them; elementwise
work is the overhead the ratio exposes. It is taken on CPU, where ``nn.GRU`` runs as matmuls
the counter sees (CUDA's fused cuDNN GRU is one opaque kernel); the count is the same for the
same batches on any device.
"""
from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from torch.utils.flop_counter import FlopCounterMode

from nmt.data.batching import Batch
from nmt.models.interface import TranslationModel
from nmt.models.loss import batch_loss
from nmt.runtime.devices import synchronize
from nmt.runtime.precision import DTYPES


def training_flops(model: TranslationModel, batches: Iterable[Batch], label_smoothing: float) -> int:
    """Matmul FLOPs of the forward and backward passes of a training step on each batch, summed.

    :param model: on CPU (CUDA's cuDNN GRU is one kernel the counter cannot see into); left in
        training mode with no gradients; no optimiser step is taken
    """
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("training_flops counts on CPU; pass a CPU model")
    model.train()
    with FlopCounterMode(display=False) as counter:
        for batch in batches:
            batch_loss(model, batch.to(torch.device("cpu")), label_smoothing).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_peak_flops(device: torch.device, precision: str = "fp32", size: int | None = None,
                      repeats: int = 5) -> tuple[float, str]:
    """The best FLOP/s of a square ``size`` matmul at training's ``precision`` (resolved: the
    type autocast runs matmuls in), after a warm-up.

    :return: (FLOP/s, dtype name)
    """
    size = size or (8192 if device.type == "cuda" else 2048)
    dtype = DTYPES.get(precision, torch.float32)  # made in it: autocast would time the casts
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for k in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        if k:  # the first is the warm-up
            best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best, str(dtype).removeprefix("torch.")
