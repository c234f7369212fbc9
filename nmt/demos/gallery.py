"""The demos by name, what each shows, and what running one gives back."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nmt.demos.outcome import DemoOptions, Outcome


@dataclass(frozen=True)
class Demo:
    name: str
    summary: str
    run: Callable[[DemoOptions], Outcome]
    needs_run: bool = False  # shows a trained run


def demos() -> dict[str, Demo]:
    """Every demo, in the chapter's order."""
    from nmt.demos import bahdanau, multihead, pooling, positions, scoring
    found = [
        Demo("pooling", "Nadaraya-Watson attention pooling: average, Gaussian-kernel and learned-width "
                        "kernel regression, their fits, weights and test MSE", pooling.run),
        Demo("scoring", "masked softmax, additive and scaled dot-product attention on the chapter's toy "
                        "tensors, with the classes the models use", scoring.run),
        Demo("bahdanau", "a trained run's attention on a sentence beside the decoder state's norm at each "
                         "step (a trained run; attn-plot shows more)", bahdanau.run, needs_run=True),
        Demo("multihead", "multi-head attention: the chapter's shape check and what each head attends to",
             multihead.run),
        Demo("positions", "sinusoidal positional encoding: columns over position, the whole table beside "
                          "binary counting, and an offset as a rotation", positions.run),
    ]
    return {demo.name: demo for demo in found}
