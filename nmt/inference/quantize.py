"""int8 weights for translation on CPU: PyTorch's dynamic quantization of the matmul layers.

Every ``nn.GRU`` and ``nn.Linear`` the model calls (GRUs, attention projections, output
layer, generator) keeps its weights as int8 with per-output-channel scales, and quantizes its
inputs on each call; embeddings stay float32, as do layers whose weight is read rather than
called (a module lists those in ``keep_float``, e.g. additive attention's vector v). Training
always runs in float32: this is a copy of a trained model for decoding, never written to a
checkpoint. The README (``nmt translate``)
gives what it costs in BLEU and buys in speed.
"""
from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch

from nmt.errors import NmtError, SettingError
from nmt.inference.loading import load_run
from nmt.inference.packed import pack_linears, packing_available
from nmt.inference.padded import pad_output_layer
from nmt.models.interface import TranslationModel
from nmt.runtime.precision import CPU_BF16_ARCHS
from nmt.runtime.precision import PRECISIONS as FLOAT_PRECISIONS
from nmt.runtime.precision import resolve

PRECISIONS = (*FLOAT_PRECISIONS, "int8")
_QUANTIZABLE = (torch.nn.GRU, torch.nn.Linear)


def quantizable(model: torch.nn.Module) -> list[str]:
    """Names of the modules :func:`quantize_int8` quantizes: every GRU and linear layer, less
    those a parent names in its ``keep_float``."""
    kept = {f"{name}.{child}" if name else child for name, module in model.named_modules()
            for child in getattr(module, "keep_float", ())}
    return [name for name, module in model.named_modules()
            if isinstance(module, _QUANTIZABLE) and name not in kept]


def quantize_int8(model: TranslationModel) -> TranslationModel:
    """A copy of ``model``, on CPU in eval mode, with int8 weights in :func:`quantizable`'s
    layers; an error if it has none (int8 would then be float32 under another name)."""
    names = quantizable(model)
    if not names:
        raise NmtError("int8: this model has no GRU or linear layer to quantize")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice: 2.13 still ships it
        try:
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
        except ImportError:
            raise SettingError("precision", "int8", f"this torch ({torch.__version__}) has no "
                               "torch.ao.quantization; use {precision} fp32", ("precision",)) from None
        spec = {name: per_channel_dynamic_qconfig for name in names}
        return quantize_dynamic(copy.deepcopy(model).cpu().eval(), spec, dtype=torch.qint8)


def decoding_device(precision: str, spec: str) -> torch.device:
    """The device to decode on at ``precision`` (one of :data:`PRECISIONS`), given the device
    setting ``spec``: int8 runs on CPU only, so there ``auto`` means CPU. A precision the
    device cannot run fails here, before a run is loaded."""
    from nmt.runtime.devices import pick_device

    if precision not in PRECISIONS:
        raise SettingError("precision", precision, f"use {', '.join(PRECISIONS)}")
    if precision != "int8":
        device = pick_device(spec)
        resolve(precision, device)
        return device
    device = pick_device("cpu" if spec == "auto" else spec)
    if device.type != "cpu":
        raise SettingError("precision", "int8", f"runs on CPU only, not {{device}} {spec}; "
                           "use {device} cpu or {precision} auto", ("device", "precision"))
    return device


def load_for_decoding(run: Path, precision: str, device: torch.device, weights: str = "default"
                      ) -> tuple[TranslationModel, Any, str]:
    """A run's model, with the weights called ``weights``, for decoding at ``precision`` on
    ``device`` (from :func:`decoding_device`):
    int8 weights for int8, bfloat16 ones for a Transformer in bf16 on CPU, the float32
    weights otherwise (autocast does the rest), with the output layer padded in float32 on CPU
    (:mod:`nmt.inference.padded`).

    :return: (model in eval mode, Tokenizer, the precision resolved: fp32, bf16, fp16 or int8)
    """
    config, model, tokenizer = load_run(run, device, weights)
    if precision == "int8":
        return quantize_int8(model), tokenizer, precision
    resolved = resolve(precision, device, config.model.arch)
    if resolved == "bf16" and device.type == "cpu" and config.model.arch in CPU_BF16_ARCHS:
        # Under inference mode autocast casts every weight again at every call, 13% of greedy
        # search's time on CPU: cast them once instead (docs/performance.md, "Decoding with
        # AMX"). The GRU keeps float32 weights: its recurrent state would run in bfloat16.
        model = model.to(torch.bfloat16)
        if packing_available(torch.bfloat16):
            model = pack_linears(model)
    elif resolved == "fp32" and device.type == "cpu":
        model = pad_output_layer(model)
    return model, tokenizer, resolved
