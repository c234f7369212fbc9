"""The command line's streams: sentences in (arguments, files, stdin) and results out (stdout,
output files), with the errors a user can cause named by flag, file or argument."""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any, Iterable

import typer
from rich.console import Console

from nmt.data.corpus import read_lines, read_text_lines
from nmt.errors import NmtError
from nmt.runtime.fileio import atomic_path, check_writable, same_file


def input_lines(path: Path | None) -> list[str]:
    """The lines of ``path``, or of stdin when None; bytes that are not UTF-8 become U+FFFD."""
    raw = read_text_lines(path) if path is not None else _stdin_lines()
    return [line.decode("utf-8", errors="replace") for line in raw]


def _stdin_lines() -> list[bytes]:
    if sys.stdin is None or sys.stdin.isatty():
        raise NmtError("nothing to translate: give TEXT arguments, --input FILE, or pipe lines to stdin")
    return read_lines(sys.stdin.buffer, "stdin")


def argument_texts(args: list[str]) -> list[str]:
    """Command-line sentences; bytes that are not UTF-8 are refused, naming the argument."""
    for k, text in enumerate(args, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = os.fsencode(text[e.start:e.end])
            raise NmtError(f"argument {k} is not valid UTF-8 (byte 0x{bad[0]:02x} at character "
                           f"{e.start + 1}); use a UTF-8 terminal, or --input FILE") from None
    return args


def to_stdout(texts: Iterable[str]) -> None:
    """Write to stdout, flushed at the end: a reader that stops early (`| head`) is no error, a
    failing stdout (`> /dev/full`) is one, and either way nothing is left buffered to fail
    again at exit."""
    try:
        for text in texts:
            sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        raise typer.Exit(code=0) from None
    except OSError as e:
        _silence_stdout()
        raise NmtError(f"cannot write to stdout ({e.strerror or e})") from None


def _silence_stdout() -> None:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def print_out(renderable: Any) -> None:
    """A rich table, or plain text as it is, on stdout through :func:`to_stdout`."""
    if isinstance(renderable, str):
        return to_stdout([renderable + "\n"])
    terminal = Console()  # rendered as for stdout, but into a string: stdout's errors are ours
    console = Console(file=io.StringIO(), force_terminal=terminal.is_terminal, width=terminal.width,
                      color_system=terminal.color_system)
    console.print(renderable)
    to_stdout([console.file.getvalue()])


def is_stdout(output: Path | None) -> bool:
    """None, ``-`` and ``/dev/stdout`` mean standard output."""
    return output is None or str(output) in ("-", "/dev/stdout")


def write_output(lines: Iterable[str], output: Path | None, flag: str = "--output") -> None:
    """Write lines to stdout as they come, or to the file ``output`` once all are done
    (atomically, see :func:`nmt.runtime.fileio.atomic_path`)."""
    if is_stdout(output):
        return to_stdout(line + "\n" for line in lines)
    if output.is_dir():
        raise NmtError(f"{flag} {output}: is a directory")
    try:
        with atomic_path(output, keep_links=True) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
    except OSError as e:
        raise NmtError(f"{flag} {output}: cannot write ({e.strerror or e})") from None


def refuse_same_file(output: Path | None, flag: str, inputs: Iterable[tuple[str, Path | str | None]]) -> None:
    """An output that is one of the inputs (by inode) would overwrite it: refuse before any work."""
    if is_stdout(output):
        return
    for name, path in inputs:
        if path is not None and same_file(output, Path(path)):
            raise NmtError(f"{flag} {output} is the {name} file; writing it would overwrite "
                           f"that input. Choose another output file")


def checked_output(path: Path | None, flag: str) -> Path | None:
    """An output file, checked writable now rather than after minutes of work; None for none
    or stdout."""
    if path is None or is_stdout(path):
        return None
    try:
        check_writable(path)
    except OSError as e:
        raise NmtError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    return path


def run_inputs(run: Path) -> list[tuple[str, str | Path | None]]:
    """A run's data files by what they are: none of them may be an output."""
    from nmt.config import read_run_config
    data = read_run_config(run / "config.yaml").data
    return [("run's test.tsv", run / "test.tsv"), ("run's valid.tsv", run / "valid.tsv"),
            *((f"run's {key}", path) for key, path in data.files().items())]
