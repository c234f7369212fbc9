"""Attention pooling as Nadaraya-Watson kernel regression (d2l.ai, "Attention Pooling").

A query x attends to keys x_i and pools their values y_i: f(x) = sum_i a(x, x_i) y_i. Average
pooling gives every key 1/n; the Gaussian kernel gives a(x, x_i) = softmax(-(x - x_i)^2 / 2);
the parametric one learns a width w, softmax(-((x - x_i) w)^2 / 2), by SGD on the squared
error of each training point predicted from the others (leave one out, else w grows until each
point only sees itself).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from nmt.demos.outcome import DemoOptions, Outcome
from nmt.errors import SettingMessage
from nmt.report.panels import Curves, Heatmap, Series

log = logging.getLogger(__name__)

TRAIN_SIZE = 50
NOISE = 0.5


def truth(x: torch.Tensor) -> torch.Tensor:
    return 2 * torch.sin(x) + x ** 0.8


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sorted training inputs uniform in [0, 5), their noisy targets, and the test inputs 0, 0.1, ..., 4.9."""
    generator = torch.Generator().manual_seed(seed)
    x_train = torch.sort(torch.rand(TRAIN_SIZE, generator=generator) * 5).values
    y_train = truth(x_train) + torch.normal(0.0, NOISE, (TRAIN_SIZE,), generator=generator)
    return x_train, y_train, torch.arange(0, 5, 0.1)


def gaussian_pooling(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     width: torch.Tensor | float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(-((q - k) w)^2 / 2)-weighted values.

    :param queries: shape (n,)
    :param keys: shape (m,), shared by every query, or (n, m), a row each
    :param values: the same shape as ``keys``
    :return: predictions, shape (n,); weights, shape (n, m)
    """
    weights = torch.softmax(-((queries.unsqueeze(-1) - keys) * width) ** 2 / 2, dim=-1)
    return (weights * values).sum(-1), weights


class ParametricPooling(nn.Module):
    """Gaussian-kernel pooling with a learned width ``w``."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(1, generator=generator))

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        return gaussian_pooling(queries, keys, values, self.w)


def leave_one_out(x: torch.Tensor) -> torch.Tensor:
    """Each row: ``x`` without its own entry, shape (n, n - 1)."""
    n = x.numel()
    keep = ~torch.eye(n, dtype=torch.bool)
    return x.expand(n, n)[keep].view(n, n - 1)


def train(x_train: torch.Tensor, y_train: torch.Tensor, epochs: int, lr: float, seed: int,
          progress: Callable[[int, int], None] = lambda done, total: None
          ) -> tuple[ParametricPooling, list[float]]:
    """SGD on the summed squared error (the chapter's loss), leave-one-out keys and values;
    the training MSE before training, then after each epoch (``progress`` hears of each)."""
    model = ParametricPooling(torch.Generator().manual_seed(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    keys, values = leave_one_out(x_train), leave_one_out(y_train)
    losses = []
    for epoch in range(epochs + 1):
        optimizer.zero_grad()
        error = model(x_train, keys, values)[0] - y_train
        losses.append(float((error.detach() ** 2).mean()))
        if epoch < epochs:
            (error ** 2).sum().backward()
            optimizer.step()
            progress(epoch + 1, epochs)
    return model, losses


def _warn_if_diverged(fits: Fits, lr: float) -> None:
    """SGD with too large a rate sends the width to infinity or NaN, and every figure with it."""
    bad = next((k for k, loss in enumerate(fits.losses) if not math.isfinite(loss)), None)
    if bad is not None or not math.isfinite(fits.width):
        when = f"training MSE {fits.losses[bad]} after epoch {bad}" if bad is not None else f"w = {fits.width}"
        log.warning(SettingMessage("lr", lr, f"the learned width diverged ({when}), so its fit and test MSE "
                                   "are meaningless; give a smaller rate (the default is 0.5)"))


@dataclass(frozen=True)
class Fits:
    """Each pooling's test predictions and test MSE; the kernel poolings' (test, train) weights;
    the learned width, and the training MSE before training and after each epoch."""

    predictions: dict[str, torch.Tensor]
    mse: dict[str, float]
    weights: dict[str, torch.Tensor]
    width: float
    losses: list[float]


def fit(seed: int = 0, epochs: int = 5, lr: float = 0.5,
        progress: Callable[[int, int], None] = lambda done, total: None) -> Fits:
    x_train, y_train, x_test = make_data(seed)
    y_test = truth(x_test)
    model, losses = train(x_train, y_train, epochs, lr, seed, progress)
    with torch.no_grad():
        kernel, kernel_weights = gaussian_pooling(x_test, x_train, y_train)
        learned, learned_weights = model(x_test, x_train, y_train)
    predictions = {"average": y_train.mean().expand_as(x_test), "Gaussian kernel": kernel,
                   "learned width": learned}
    mse = {name: float(((p - y_test) ** 2).mean()) for name, p in predictions.items()}
    return Fits(predictions, mse, {"Gaussian kernel": kernel_weights, "learned width": learned_weights},
                float(model.w.detach()), losses)


def run(options: DemoOptions) -> Outcome:
    fits = fit(options.seed, options.epochs, options.lr, options.progress)
    _warn_if_diverged(fits, options.lr)
    x_train, y_train, x_test = make_data(options.seed)
    lines = [f"epoch {k}: training MSE {loss:.4f}" + (" (before training)" if k == 0 else "")
             for k, loss in enumerate(fits.losses)]
    lines += [f"learned width w = {fits.width:.3f}"]
    lines += [f"test MSE, {name}: {value:.4f}" for name, value in fits.mse.items()]
    series = [Series("truth", x_test.tolist(), truth(x_test).tolist(), "k-"),
              Series("training data", x_train.tolist(), y_train.tolist(), "o")]
    series += [Series(f"{name} (MSE {fits.mse[name]:.3f})", x_test.tolist(), p.tolist(), style)
               for (name, p), style in zip(fits.predictions.items(), ("--", "-", "-"))]
    heatmaps = [Heatmap(f"{name} pooling: weights" + (f", w = {fits.width:.2f}" if name == "learned width" else ""),
                        w, "training input (sorted)", "test input x", "attention weight",
                        yticks=[f"{x:.1f}" if k % 5 == 0 else "" for k, x in enumerate(x_test.tolist())])
                for name, w in fits.weights.items()]
    return Outcome(lines, [Curves("fits against the truth 2 sin(x) + x^0.8", "x", "y", series), *heatmaps,
                           Curves("learned-width pooling: training", "epoch", "training MSE",
                                  [Series("", range(len(fits.losses)), fits.losses, "o-")])],
                   "Nadaraya-Watson attention pooling", columns=2)
