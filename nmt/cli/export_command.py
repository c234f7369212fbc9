"""``nmt export``: a Transformer run as a CTranslate2 model, for production decoding with
CTranslate2 (or with ``nmt translate --engine ctranslate2``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.options import Opt, WeightsOpt, err, user_errors
from nmt.errors import SettingError

FORMATS = ("ctranslate2",)


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command(epilog="Example: nmt export checkpoints/20261203-101500 -o fr-en-ct2 --quantization int8, "
                       "then nmt translate --engine ctranslate2 --checkpoint fr-en-ct2 \"Tom chases Jerry.\""
                )(export)


def export(
    run: Annotated[Path, typer.Argument(help="Run directory of a Transformer.", show_default=False)],
    output: Annotated[Path, Opt("--output", "-o", help="The new directory of the exported model.",
                                show_default=False)],
    format: Annotated[str, Opt("--format", help="ctranslate2: CTranslate2's model format.")] = "ctranslate2",
    quantization: Annotated[str, Opt(help="Weights as stored: float32, int8, int8_float32, int16, bfloat16 "
                                     "(or float16, int8_float16, int8_bfloat16 for GPUs).")] = "float32",
    weights: WeightsOpt = "default",
) -> None:
    """Export a Transformer run as a CTranslate2 model directory.

    The run's default weights (or --weights), its vocabularies and its SentencePiece model, with
    nmt_export.json saying how to tokenise for it."""
    from nmt.export.exported import export_run

    with user_errors():
        if format not in FORMATS:
            raise SettingError("format", format, f"must be one of {', '.join(FORMATS)}")
        exported = export_run(run, output, quantization, weights)
        err.print(f"exported {run} to [bold]{exported.directory}[/] ({quantization}, CTranslate2 "
                  f"{exported.manifest['ctranslate2_version']})", highlight=False)
