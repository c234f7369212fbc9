"""Bahdanau attention in a trained model (d2l.ai, "The Bahdanau Attention Mechanism"): the
decoder attends over the encoder's states at every step. Shown for one sentence: the weights
(as ``nmt attn-plot`` draws them; it also draws several sentences, layers and heads) beside the
norm of the decoder's output state at each step, the vector the output layer reads."""
from __future__ import annotations

import torch

from nmt.api import load
from nmt.data.batching import make_batch
from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.demos.outcome import DemoOptions, Outcome
from nmt.errors import NmtError
from nmt.inference.translate import Translator
from nmt.report.panels import Curves, Heatmap, Series
from nmt.tools.inspect import attention_maps


@torch.inference_mode()
def state_norms(translator: Translator, source_ids: list[int], tokens: list[int]) -> list[float]:
    """The decoder output's L2 norm at each step while it reads ``tokens`` (then </s>) after
    ``source_ids``, step by step as search does."""
    model = translator.model
    batch = make_batch([source_ids]).to(translator.device)
    state = model.encode(batch.src, batch.src_len)
    norms, previous = [], BOS_ID
    for token in tokens + [EOS_ID]:
        outputs, state, _ = model.step(torch.tensor([previous], device=translator.device), state)
        norms.append(float(outputs.float().norm()))
        previous = token
    return norms


def run(options: DemoOptions) -> Outcome:
    model = load(options.checkpoint, options.device, "fp32")  # None: the newest run in checkpoints/
    translator = model.translator()
    [ids] = translator.encode([options.text])
    if not ids:
        raise NmtError("--text has nothing to translate")
    [[hyp]] = translator.nbest_of_ids([ids])
    maps = attention_maps(translator, options.text, ids, hyp)
    weights = maps.weights["cross"][-1].mean(0)  # the last layer, its heads averaged: (target, source)
    queries, keys = maps.pieces["cross"]
    norms = state_norms(translator, ids, hyp.tokens)[:len(queries)]
    lines = [f"{options.text} -> {maps.text}",
             *[f"step {k + 1} {piece!r}: attends most to {keys[int(row.argmax())]!r} ({float(row.max()):.2f}), "
               f"decoder state norm {norm:.2f}" for k, (piece, row, norm) in enumerate(zip(queries, weights, norms))],
             f"every layer and head, several sentences: nmt attn-plot --checkpoint {model.run} "
             f"\"{options.text}\""]
    panels = [Heatmap("encoder-decoder attention", weights, "source pieces", "generated pieces", "weight",
                      xticks=keys, yticks=queries, limits=(0, 1)),
              Curves("decoder output state", "step (generated piece)", "L2 norm",
                     [Series("", range(1, len(norms) + 1), norms, "o-")])]
    return Outcome(lines, panels, f"{maps.source} → {maps.text}", columns=2)
