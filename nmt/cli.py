"""The ``nmt`` command line: parses options, calls the library, prints. Nothing else lives here."""
from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console
from rich.logging import RichHandler

from nmt import __version__
from nmt.config import build_config, default_of, load_config_file
from nmt.errors import NmtError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
                  help="nmt: train, run and inspect GRU + Bahdanau-attention translation models.")
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nmt {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings and errors only.")] = False,
) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", force=True,
                        handlers=[RichHandler(console=err, show_path=False)])


@contextmanager
def _user_errors() -> Iterator[None]:
    """A user's mistake becomes one clear line on stderr and exit code 1, never a traceback."""
    try:
        yield
    except NmtError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None


def _h(key: str, text: str) -> str:
    return f"{text} \\[default: {default_of(key)}]"


Opt = typer.Option


@app.command(epilog="Example: nmt train --corpus data/fra-eng/fra.txt --max-minutes 30")
def train(
    corpus: Annotated[Optional[Path], Opt(help="Parallel TSV corpus, SRC<TAB>TGT per line. "
                                          "\\[default: data/fra-eng/fra.txt, downloaded if missing]",
                                          rich_help_panel="Data")] = None,
    src_file: Annotated[Optional[Path], Opt(help="Source side as a plain-text file (with --tgt-file).",
                                            rich_help_panel="Data")] = None,
    tgt_file: Annotated[Optional[Path], Opt(help="Target side, aligned line by line with --src-file.",
                                            rich_help_panel="Data")] = None,
    valid_size: Annotated[Optional[int], Opt(help=_h("valid_size", "Held-out validation source sentences."),
                                             rich_help_panel="Data")] = None,
    test_size: Annotated[Optional[int], Opt(help=_h("test_size", "Held-out test source sentences."),
                                            rich_help_panel="Data")] = None,
    max_pieces: Annotated[Optional[int], Opt(help=_h("max_pieces", "Drop longer training pairs."),
                                             rich_help_panel="Data")] = None,
    vocab_size: Annotated[Optional[int], Opt(help=_h("vocab_size", "Joint SentencePiece vocabulary size."),
                                             rich_help_panel="Data")] = None,
    strict: Annotated[bool, Opt(help="Fail on any malformed corpus line instead of skipping it.",
                                rich_help_panel="Data")] = False,
    embed_size: Annotated[Optional[int], Opt(help=_h("embed_size", "Embedding size."),
                                             rich_help_panel="Model")] = None,
    hidden_size: Annotated[Optional[int], Opt(help=_h("hidden_size", "GRU and attention size."),
                                              rich_help_panel="Model")] = None,
    layers: Annotated[Optional[int], Opt(help=_h("layers", "GRU layers in encoder and decoder."),
                                         rich_help_panel="Model")] = None,
    bidirectional: Annotated[Optional[bool], Opt("--bidirectional/--unidirectional",
                                                 help=_h("bidirectional", "Bidirectional encoder."),
                                                 rich_help_panel="Model")] = None,
    dropout: Annotated[Optional[float], Opt(help=_h("dropout", "Dropout probability."),
                                            rich_help_panel="Model")] = None,
    epochs: Annotated[Optional[int], Opt(help=_h("epochs", "Most epochs."), rich_help_panel="Budget")] = None,
    max_steps: Annotated[Optional[int], Opt(help="Most optimiser steps in total.",
                                            rich_help_panel="Budget")] = None,
    max_minutes: Annotated[Optional[float], Opt(help="Most wall-clock minutes of training.",
                                                rich_help_panel="Budget")] = None,
    batch_size: Annotated[Optional[int], Opt(help=_h("batch_size", "Sentences per batch."),
                                             rich_help_panel="Optimisation")] = None,
    batch_tokens: Annotated[Optional[int], Opt(help="Target pieces per batch (instead of --batch-size).",
                                               rich_help_panel="Optimisation")] = None,
    lr: Annotated[Optional[float], Opt(help=_h("lr", "Adam learning rate."),
                                       rich_help_panel="Optimisation")] = None,
    lr_decay: Annotated[Optional[float], Opt(help=_h("lr_decay", "LR factor when validation loss stalls."),
                                             rich_help_panel="Optimisation")] = None,
    clip: Annotated[Optional[float], Opt(help=_h("clip", "Gradient norm clipping."),
                                         rich_help_panel="Optimisation")] = None,
    label_smoothing: Annotated[Optional[float], Opt(help=_h("label_smoothing", "Label smoothing."),
                                                    rich_help_panel="Optimisation")] = None,
    valid_every: Annotated[Optional[int], Opt(help=_h("valid_every", "Validate every N steps (0: each epoch)."),
                                              rich_help_panel="Optimisation")] = None,
    valid_bleu_size: Annotated[Optional[int], Opt(help=_h("valid_bleu_size", "Validation sentences decoded for BLEU."),
                                                  rich_help_panel="Optimisation")] = None,
    seed: Annotated[Optional[int], Opt(help=_h("seed", "Random seed."))] = None,
    device: Annotated[Optional[str], Opt(help=_h("device", "auto, cpu, cuda, cuda:N or mps."))] = None,
    threads: Annotated[Optional[int], Opt(help=_h("threads", "CPU threads (0: one per core)."))] = None,
    run_dir: Annotated[Optional[Path], Opt(help="Run directory. \\[default: checkpoints/<timestamp>]")] = None,
    config: Annotated[Optional[Path], Opt(help="YAML file with any of these options; flags win.")] = None,
) -> None:
    """Train an encoder-decoder with Bahdanau attention on a parallel corpus.

    Every option can also be set in a YAML file passed with --config (keys as the flag names,
    with _ for -); the resolved configuration is saved as config.yaml in the run directory.
    """
    flags = {k: v for k, v in locals().items()
             if v is not None and k not in ("config", "run_dir", "strict")}
    from nmt.runs import new_run_dir, train_new_run

    flags = {k: str(v) if isinstance(v, Path) else v for k, v in flags.items()}
    with _user_errors():
        file_options = load_config_file(config) if config else {}
        cfg = build_config(file_options, flags)
        run = run_dir or new_run_dir()
        state = train_new_run(cfg, run, strict)
        err.print(f"run saved in [bold]{run}[/]: {state.step} steps, best validation BLEU "
                  f"{state.best_bleu:.2f}", highlight=False)


def _read_input_lines(path: Path | None) -> list[str]:
    from nmt.corpus import read_text_lines
    raw = read_text_lines(path) if path is not None else _stdin_lines()
    return [line.decode("utf-8", errors="replace") for line in raw]


def _stdin_lines() -> list[bytes]:
    if sys.stdin is None or sys.stdin.isatty():
        raise NmtError("nothing to translate: give TEXT arguments, --input FILE, or pipe lines to stdin")
    from nmt.corpus import split_lines
    return split_lines(sys.stdin.buffer.read())


def _write_output(lines: list[str], output: Path | None) -> None:
    if output is None:
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    from nmt.fileio import atomic_write_lines
    if output.is_dir():
        raise NmtError(f"--output {output}: is a directory")
    try:
        atomic_write_lines(output, lines)
    except OSError as e:
        raise NmtError(f"--output {output}: cannot write ({e.strerror})") from None


def _load_translator(checkpoint: Path | None, device: str) -> Any:
    from nmt.checkpoint import latest_run, load_run
    from nmt.devices import pick_device, set_threads
    from nmt.translate import Translator

    set_threads(0)
    dev = pick_device(device)
    run = checkpoint or latest_run()
    _, model, tokenizer = load_run(run, dev)
    logging.getLogger(__name__).debug("translating with %s on %s", run, dev)
    return Translator(model, tokenizer, dev)


@app.command(epilog='Example: nmt translate "Tom chases Jerry."   or   nmt translate --input en.txt --output fr.txt')
def translate(
    text: Annotated[Optional[list[str]], typer.Argument(help="Sentences to translate, one output line each. "
                                                        "Without TEXT or --input, lines are read from stdin.",
                                                        show_default=False)] = None,
    checkpoint: Annotated[Optional[Path], Opt(help="Run directory. \\[default: newest in checkpoints/]")] = None,
    input: Annotated[Optional[Path], Opt("--input", "-i", help="File of sentences, one per line.")] = None,
    output: Annotated[Optional[Path], Opt("--output", "-o", help="Write translations here. \\[default: stdout]")] = None,
    batch_size: Annotated[int, Opt(help="Sentences decoded together.")] = 64,
    device: Annotated[str, Opt(help="auto, cpu, cuda, cuda:N or mps.")] = "auto",
) -> None:
    """Translate sentences with a trained run: one output line per input line, in order."""
    with _user_errors():
        if text and input is not None:
            raise NmtError("give TEXT arguments or --input FILE, not both")
        if batch_size < 1:
            raise NmtError(f"--batch-size must be >= 1, got {batch_size}")
        lines = list(text) if text else _read_input_lines(input)
        translator = _load_translator(checkpoint, device)
        _write_output(translator.translate(lines, batch_size), output)


def main() -> None:
    """Console-script entry point."""
    app()
