"""int8 weights for translation on CPU: PyTorch's dynamic quantization of the matmul layers.

The GRUs, the attention projections, the output layer and the generator keep their weights
as int8 with per-output-channel scales, and quantize their inputs on each call; embeddings
and the attention vector v stay float32. Training always runs in float32: this is a copy of
a trained model for decoding, never written to a checkpoint. The README (``nmt translate``)
gives what it costs in BLEU and buys in speed.
"""
from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import load_run
from nmt.errors import NmtError
from nmt.model import Seq2Seq

PRECISIONS = ("fp32", "int8")
_QUANTIZED = ("encoder.rnn", "decoder.rnn", "decoder.attention.key_proj",
              "decoder.attention.query_proj", "decoder.output_layer", "generator.proj")


def quantize_int8(model: Seq2Seq) -> Seq2Seq:
    """A copy of ``model``, on CPU in eval mode, with int8 weights in the layers above."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice: 2.13 still ships it
        try:
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
        except ImportError:
            raise NmtError(f"--precision int8: this torch ({torch.__version__}) has no "
                           "torch.ao.quantization; use --precision fp32") from None
        present = {name for name, _ in model.named_modules()}
        spec = {name: per_channel_dynamic_qconfig for name in _QUANTIZED if name in present}
        return quantize_dynamic(copy.deepcopy(model).cpu().eval(), spec, dtype=torch.qint8)


def decoding_device(precision: str, spec: str) -> torch.device:
    """The device to decode on at ``precision`` (``--device`` ``spec``); int8 runs on CPU
    only, so there ``auto`` means CPU."""
    from nmt.devices import pick_device

    if precision not in PRECISIONS:
        raise NmtError(f"--precision {precision}: use {' or '.join(PRECISIONS)}")
    if precision == "fp32":
        return pick_device(spec)
    device = pick_device("cpu" if spec == "auto" else spec)
    if device.type != "cpu":
        raise NmtError(f"--precision int8 runs on CPU only, not --device {spec}; "
                       "use --device cpu or --precision fp32")
    return device


def load_for_decoding(run: Path, precision: str, spec: str) -> tuple[torch.device, Seq2Seq, Any]:
    """A run's model at ``precision`` on its decoding device (``--device`` ``spec``).

    :return: (device, model in eval mode, Tokenizer)
    """
    device = decoding_device(precision, spec)
    _, model, tokenizer = load_run(run, device)
    return device, (quantize_int8(model) if precision == "int8" else model), tokenizer
