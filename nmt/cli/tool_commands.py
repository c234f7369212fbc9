"""The inspection and measurement commands: ``nmt attn-plot``, ``nmt info`` and ``nmt bench``."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmt.cli.options import (BeamOpt, CheckpointOpt, DeviceOpt, Opt, PenaltyOpt, RunArg, WeightsOpt, at_least, err,
                             load_translator, one_run, search_options, user_errors, with_default)
from nmt.cli.streams import argument_texts, checked_output, is_stdout, print_out, write_output
from nmt.config import build_config, load_config_file
from nmt.errors import NmtError
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY, check_length_penalty


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    app.command(name="attn-plot", epilog='Example: nmt attn-plot "Tom chases Jerry." -o attn.png --show')(attn_plot)
    app.command(epilog="Example: nmt info checkpoints/20261130-074100")(info)
    app.command(epilog="Example: nmt bench --pairs 20000 --steps 30 --beam 5 --json-out bench.json")(bench)
    app.command(epilog="Example: nmt average checkpoints/run --last 3 -o last3, then nmt eval --weights last3 "
                       "--checkpoint checkpoints/run")(average)


def average(
    run: Annotated[Path, typer.Argument(help="Run directory trained with --keep-checkpoints.", show_default=False)],
    last: Annotated[Optional[int], Opt(help="Average the last N kept checkpoints. \\[default: all kept]")] = None,
    steps: Annotated[Optional[str], Opt(help="Average these kept steps, e.g. 1200,1400,1600.")] = None,
    output: Annotated[str, Opt("--output", "-o", help="Name of the new weights in the run: "
                               "RUN/NAME.safetensors, then --weights NAME (averaged: unless training wrote "
                               "it).")] = "averaged",
) -> None:
    """Average the weights a run kept into another weights file.

    The weights of --keep-checkpoints, element by element, for translate, eval, serve and attn-plot (--weights NAME)."""
    from nmt.tools.average import average as write_average
    from nmt.tools.average import choose_steps

    with user_errors():
        if last is not None and steps is not None:
            raise NmtError("give --last or --steps, not both")
        if last is not None:
            at_least("--last", last, 2)
        chosen = choose_steps(run, _steps(steps), last)
        path = write_average(run, chosen, output)
        err.print(f"averaged steps {', '.join(map(str, chosen))} into [bold]{path}[/]; use it with "
                  f"--weights {output}", highlight=False)


def _steps(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise NmtError(f"--steps {text}: must be step numbers separated by commas, e.g. 1200,1400") from None
    if not steps:
        raise NmtError("--steps: give at least two step numbers")
    return steps


def attn_plot(
    text: Annotated[list[str], typer.Argument(help="Sentences; each gets a panel.", show_default=False)],
    checkpoint: CheckpointOpt = None,
    output: Annotated[Path, Opt("--output", "-o", help="Figure file: .png, .svg or .pdf.")] = Path("attn.png"),
    show: Annotated[bool, Opt("--show", help="Also draw the weights in the terminal.")] = False,
    kind: Annotated[str, Opt(help="cross (encoder-decoder), or a transformer's encoder or decoder "
                             "self-attention.")] = "cross",
    layer: Annotated[Optional[int], Opt(help="Layer, from 1. \\[default: the last]")] = None,
    head: Annotated[str, Opt(help="Head, from 1; mean of the layer's heads; or all: a panel each.")] = "mean",
    beam: BeamOpt = 1,
    length_penalty: PenaltyOpt = DEFAULT_LENGTH_PENALTY,
    device: DeviceOpt = "auto",
    weights: WeightsOpt = "default",
) -> None:
    """Draw each translation's attention weights as a heatmap.

    Source pieces across, generated pieces down; a panel per sentence (or per head)."""
    from nmt.cli.display import attention_table
    from nmt.report.plotting import GRID_COLUMNS, check_panels, figure_format, plot_attention
    from nmt.tools.inspect import AttentionView, attention_panels

    with user_errors():
        figure_format(output)
        check_panels(len(text))
        view = AttentionView.from_flags(kind, layer, head)
        translator = load_translator(one_run("attn-plot", checkpoint), device, search_options(beam, None, length_penalty),
                                     weights=weights)
        lines = argument_texts(text)
        panels = attention_panels(translator, lines, view)
        per_sentence = len(panels) // len(lines)
        check_panels(len(lines), per_sentence)
        plot_attention(panels, output, per_sentence if head == "all" else GRID_COLUMNS)
        if show:
            for panel in panels:
                print_out(attention_table(panel))
        err.print(f"wrote {output}", highlight=False)


def info(
    run: RunArg = None,
    checkpoint: CheckpointOpt = None,
    json_out: Annotated[bool, Opt("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """Print a run's model card: architecture, data, training.

    Sizes and parameters per block, the vocabulary, where the held-out sets came from, the
    budget and what ended it, the default weights and why, the device and library versions."""
    import json

    from nmt.cli.display import key_value_table
    from nmt.inference.loading import latest_run
    from nmt.tools.inspect import model_card

    with user_errors():
        card = model_card(one_run("info", checkpoint, run) or latest_run())
        print_out(json.dumps(card, indent=2) if json_out else
               key_value_table(f"nmt run {card['run']}", [(k, v) for k, v in card.items() if k != "run"]))


def bench(
    corpus: Annotated[Optional[Path], Opt(help="Corpus for the training phase. \\[default: data/fra-eng/fra.txt]")] = None,
    pairs: Annotated[Optional[int], Opt(help="Random corpus pairs to train on. "
                                        "\\[default: all of them]")] = None,
    steps: Annotated[int, Opt(help="Timed training steps.")] = 30,
    warmup: Annotated[int, Opt(help="Untimed training steps first.")] = 5,
    embed_size: Annotated[Optional[int], Opt(help=with_default("embed_size", "Embedding size."))] = None,
    hidden_size: Annotated[Optional[int], Opt(help=with_default("hidden_size", "Hidden size."))] = None,
    layers: Annotated[Optional[int], Opt(help=with_default("layers", "Layers in encoder and decoder."))] = None,
    arch: Annotated[Optional[str], Opt(help=with_default("arch", "gru or transformer."))] = None,
    heads: Annotated[Optional[int], Opt(help=with_default("heads", "Transformer: attention heads."))] = None,
    ff_size: Annotated[Optional[int], Opt(help=with_default("ff_size", "Transformer: feed-forward size."))] = None,
    vocab_size: Annotated[Optional[int], Opt(help=with_default("vocab_size", "Joint SentencePiece vocabulary size."))] = None,
    batch_size: Annotated[Optional[int], Opt(help=with_default("batch_size", "Training sentences per batch."))] = None,
    checkpoint: Annotated[Optional[list[Path]], Opt(help="Trained run for the translation phases. "
                                              "\\[default: newest in checkpoints/, skipped if none]")] = None,
    sentences: Annotated[int, Opt(help="Test sources translated per phase.")] = 2000,
    beam: BeamOpt = 5,
    length_penalty: PenaltyOpt = DEFAULT_LENGTH_PENALTY,
    translate_batch: Annotated[int, Opt(help="Sentences decoded together.")] = 128,
    device: DeviceOpt = "auto",
    threads: Annotated[int, Opt(help="CPU threads (0: one per core).")] = 0,
    precision: Annotated[Optional[str], Opt(help=with_default("precision", "Training: auto, fp32, bf16 or fp16 "
                                                      "(CUDA)."))] = None,
    translate_precision: Annotated[Optional[str], Opt(help="auto, fp32, bf16, fp16 or int8 (CPU) for the "
                                                      "translation phases. \\[default: --precision]")] = None,
    kernels: Annotated[str, Opt(help="fast, or reference: plain PyTorch, to measure what the "
                                "hand-written CPU paths buy.")] = "fast",
    json_out: Annotated[Optional[Path], Opt(help="Write the figures as JSON to this file ('-': stdout). "
                                            "\\[default: bench.json, unless --json]")] = None,
    json_stdout: Annotated[bool, Opt("--json", help="Print the figures as JSON instead of a table.")] = False,
    config: Annotated[Optional[Path], Opt(help="YAML file of nmt train's options (the model and batch "
                                          "to measure); flags win.")] = None,
) -> None:
    """Measure training and translation speed and memory here.

    Throughput and peak memory of each phase, and how close training runs to the device's matmul peak."""
    import dataclasses
    import json

    from nmt.cli.output import bench_table
    from nmt.config import read_run_config
    from nmt.runtime.weights import weights_path
    from nmt.inference.quantize import decoding_device
    from nmt.tools.bench import run_bench, translation_run

    with user_errors():
        for flag, value, minimum in (("--pairs", pairs, 2), ("--steps", steps, 1), ("--warmup", warmup, 0),
                                     ("--sentences", sentences, 1), ("--beam", beam, 1),
                                     ("--translate-batch", translate_batch, 1)):
            if value is not None:
                at_least(flag, value, minimum)
        check_length_penalty(length_penalty)
        sizes = {"embed_size": embed_size, "hidden_size": hidden_size, "layers": layers, "arch": arch,
                 "heads": heads, "ff_size": ff_size, "vocab_size": vocab_size,
                 "batch_size": batch_size}  # unset: nmt train's defaults
        cfg = build_config(load_config_file(config) if config else {},
                           {k: v for k, v in sizes.items() if v is not None} |
                           ({"corpus": str(corpus)} if corpus else {}) |
                           {"device": device, "threads": threads, "kernels": kernels} |
                           ({"precision": precision} if precision else {}))
        decode_at = translate_precision or cfg.train.precision
        decode_on = decoding_device(decode_at, device)  # a bad flag fails now, not after training
        json_file = checked_output(json_out if json_out is not None else None if json_stdout
                                   else Path("bench.json"), "--json-out")  # before measuring
        run = translation_run(one_run("bench", checkpoint))
        if run is None:
            err.print("no trained run in checkpoints/: skipping the translation phases")
        else:  # a broken run fails now, not after the training phase
            read_run_config(run / "config.yaml")
            weights_path(run)
        result = run_bench(cfg, pairs, steps, warmup, run, sentences, beam, translate_batch, decode_at,
                           decode_on, length_penalty)
        record = dataclasses.asdict(result) | {"translation_run": str(run) if run else None}
        text = json.dumps(record, indent=2)
        if json_file is not None:
            write_output([text], json_file, "--json-out")
        json_stdout = json_stdout or (json_out is not None and is_stdout(json_out))
        print_out(text if json_stdout else bench_table(record))
