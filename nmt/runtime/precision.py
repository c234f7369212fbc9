"""Numeric precision: float32, or bfloat16/float16 autocast where the hardware computes it.

``--precision`` takes ``auto``, ``fp32``, ``bf16`` or ``fp16`` (translation also ``int8``,
:mod:`nmt.inference.quantize`). Autocast runs the matmuls in the half-width type and keeps
softmaxes, norms, the loss and the weights in float32; float16 needs loss scaling (a
``GradScaler``), bfloat16 has float32's range and needs none.

``auto`` resolves per device and model family to what measured faster without a BLEU loss
(docs/performance.md, "Precision"): on a CUDA GPU bf16 where it has it, else fp16; on a CPU
that computes bf16 natively (AVX512-BF16 or AMX), bf16 for a Transformer, fp32 for a GRU
(bf16 turns off its hand-written backward through time and bought little there); fp32 on
any other CPU, where bf16 is emulated and slow.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch

from nmt.errors import SettingError

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # the precision setting's values, as this module means them
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # as Linux names them in /proc/cpuinfo
CPU_BF16_ARCHS = ("transformer",)  # where auto picks bf16 on a CPU that has it


@functools.cache
def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The CPU's flags that compute bfloat16 natively; empty where it has none or its flags
    cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ()
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return tuple(f for f in _NATIVE_BF16_FLAGS if f in flags)


def resolve(spec: str, device: torch.device, arch: str = "gru") -> str:
    """``fp32``, ``bf16`` or ``fp16``: what ``spec`` means on ``device`` for a model of
    ``arch``, or a SettingError for one the device cannot run."""
    if spec not in PRECISIONS:
        raise SettingError("precision", spec, f"use {', '.join(PRECISIONS)}")
    if spec == "fp32":
        return spec
    if device.type == "cuda":
        has_bf16 = torch.cuda.is_bf16_supported()
        if spec == "auto":
            return "bf16" if has_bf16 else "fp16"
        if spec == "bf16" and not has_bf16:
            raise SettingError("precision", spec, f"{torch.cuda.get_device_name(device)} has no "
                               "bfloat16; use {precision} fp16 or auto", ("precision",))
        return spec
    if device.type == "cpu":
        if spec == "auto":
            return "bf16" if cpu_bf16_flags() and arch in CPU_BF16_ARCHS else "fp32"
        if spec == "fp16":
            raise SettingError("precision", spec, "float16 autocast runs on CUDA only; on CPU use "
                               "{precision} bf16, fp32 or auto", ("precision",))
        if not cpu_bf16_flags():
            _warn_emulated()
        return spec
    if spec == "auto":
        return "fp32"
    raise SettingError("precision", spec, f"mixed precision runs on CUDA or CPU, not {device.type}; "
                       "use {precision} fp32", ("precision",))


@functools.cache
def _warn_emulated() -> None:
    log.warning("this CPU has no native bfloat16 (no avx512_bf16 or amx_bf16 flag): "
                "bf16 runs emulated, slower than fp32")


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast to ``precision`` (resolved) on ``device``: bf16 or fp16; anything else (fp32,
    int8 weights) runs as it is."""
    if precision not in DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def needs_loss_scaling(precision: str) -> bool:
    """float16's range is too narrow for small gradients: scale the loss (``GradScaler``)."""
    return precision == "fp16"
