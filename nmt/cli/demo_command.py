"""``nmt demo``: the attention chapter's experiments, each a figure and the numbers to notice."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmt.cli.options import CheckpointOpt, DeviceOpt, Opt, at_least, err, one_run, user_errors
from nmt.cli.streams import print_out
from nmt.errors import NmtError


def register(app: typer.Typer) -> None:
    """Add ``demo`` to ``app``."""
    app.command(epilog="Example: nmt demo pooling -o pooling.svg; nmt demo all -o figures/")(demo)


def demo(
    name: Annotated[Optional[str], typer.Argument(help="The demo (see --list), or all.", show_default=False)] = None,
    output: Annotated[Optional[str], Opt("--output", "-o", help="Figure file (.png, .svg or .pdf), or a directory "
                                         "to write NAME.png in. \\[default: NAME.png]")] = None,
    list_demos: Annotated[bool, Opt("--list", help="Name each demo and what it shows.")] = False,
    seed: Annotated[int, Opt(help="Random seed: the same seed draws the same figures.")] = 0,
    epochs: Annotated[int, Opt(help="pooling: SGD epochs of the learned width.")] = 5,
    lr: Annotated[float, Opt(help="pooling: SGD learning rate.")] = 0.5,
    checkpoint: CheckpointOpt = None,
    text: Annotated[str, Opt(help="bahdanau: the sentence.")] = "I am cold because the window is open.",
    device: DeviceOpt = "auto",
) -> None:
    """Run the d2l.ai attention chapter's experiments.

    On nmt's own modules; each writes a figure and prints the numbers to notice."""
    from nmt.demos.gallery import demos
    from nmt.demos.outcome import DemoOptions
    from nmt.report.panels import plot_panels
    from nmt.report.progress import CountProgress

    with user_errors():
        gallery = demos()
        if list_demos or name is None:
            width = max(map(len, gallery))
            print_out("\n".join(f"{n:<{width}}  {d.summary}" for n, d in gallery.items()))
            return
        run = one_run("demo", checkpoint)
        names = _chosen(name, gallery, run is not None)
        if name == "all" and run is None:
            err.print("note: bahdanau shows a trained run; give --checkpoint to include it", highlight=False)
        at_least("--epochs", epochs)
        if not (math.isfinite(lr) and lr > 0):
            raise NmtError(f"--lr must be a finite number > 0, got {lr}")
        options = DemoOptions(seed, epochs, lr, run, text, device)
        paths = {n: _figure_path(output, n, len(names) > 1) for n in names}
        for n in names:
            with CountProgress(n) as progress:
                outcome = gallery[n].run(dataclasses.replace(options, progress=progress))
            plot_panels(outcome.panels, paths[n], outcome.title, outcome.columns)
            print_out("\n".join([f"[{n}]", *outcome.lines]))
            err.print(f"wrote {paths[n]}", highlight=False, soft_wrap=True)


def _chosen(name: str, gallery: dict, with_run: bool) -> list[str]:
    """The demos ``name`` means: all of them (the trained run's only with --checkpoint), or one."""
    if name == "all":
        return [n for n, d in gallery.items() if with_run or not d.needs_run]
    if name not in gallery:
        raise NmtError(f"no demo named {name!r}: the demos are {', '.join(gallery)} (nmt demo --list)")
    return [name]


def _figure_path(given: str | None, name: str, several: bool) -> Path:
    """Where demo ``name``'s figure goes: ``given`` itself, or NAME.png in it when it is a
    directory (existing, ending in /, or without a suffix) or several demos run."""
    from nmt.report.plotting import figure_format

    if given is None:
        return Path(f"{name}.png")
    output = Path(given)
    directory = output.is_dir() or given.endswith(("/", os.sep)) or not output.suffix
    if several and not directory:
        raise NmtError(f"--output {given}: several demos write several figures; give a directory")
    if directory:
        output.mkdir(parents=True, exist_ok=True)
        return output / f"{name}.png"
    figure_format(output)
    return output
