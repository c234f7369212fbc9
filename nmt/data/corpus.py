"""Reading and normalising parallel text, streamed: plain or gzipped files, a line at a time,
with what is skipped and why counted as it goes."""
from __future__ import annotations

import contextlib
import gzip
import itertools
import logging
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from nmt.encoding import binary_problem, conversion_hint, wide_encoding
from nmt.errors import NmtError, SettingError

log = logging.getLogger(__name__)

# Non-breaking, narrow and other odd spaces (French typography uses U+202F before "!?;:").
_ODD_SPACE = re.compile(r"[\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_ZERO_WIDTH = re.compile(r"[\u200b\u200c\u200d\u2060\ufeff]")
MAX_LINE_CHARS = 2000  # longer lines are skipped as absurd rather than read
MAX_LINE_BYTES = 1 << 20  # a longer line is no sentence: the whole input is refused


def normalize(text: str) -> str:
    """Unicode NFC, zero-width characters removed, every run of spaces one plain space, trimmed."""
    text = unicodedata.normalize("NFC", text)
    text = _ZERO_WIDTH.sub("", text)
    return _ODD_SPACE.sub(" ", text).strip()


@dataclass
class ReadReport:
    """How many lines were skipped and why, with the first few line numbers of each reason."""

    path: str
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, list[int]] = field(default_factory=dict)

    def skip(self, reason: str, line_no: int) -> None:
        self.skipped[reason] += 1
        self.examples.setdefault(reason, [])
        if len(self.examples[reason]) < 5:
            self.examples[reason].append(line_no)

    def summary(self) -> str:
        parts = [f"{n} {reason} (lines {', '.join(map(str, self.examples[reason]))}"
                 f"{', ...' if n > len(self.examples[reason]) else ''})"
                 for reason, n in self.skipped.most_common()]
        return f"{self.path}: kept {self.kept} pairs, skipped " + "; ".join(parts)


def read_lines(stream: BinaryIO, name: str, max_line_bytes: int = MAX_LINE_BYTES) -> list[bytes]:
    """Every line of :func:`iter_lines`, as a list."""
    return list(iter_lines(stream, name, max_line_bytes))


def iter_lines(stream: BinaryIO, name: str, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a binary stream without a UTF-8 BOM, newlines or CRs before them, one at a time.

    Read line by line with a cap, so an endless "line" (``/dev/zero``, a binary file) is
    refused after ``max_line_bytes`` instead of filling the memory. UTF-16 or UTF-32 text is
    refused from its first bytes (:func:`nmt.encoding.wide_encoding`).
    """
    head, checked, count = b"", False, 0  # the first bytes, until they are checked
    while line := stream.readline(max_line_bytes + 1):
        if len(line) > max_line_bytes:
            raise NmtError(f"{name}: line {count + 1} is longer than {max_line_bytes:,} bytes; "
                           f"not a text file of sentences")
        if not checked:
            head += line
            if len(head) >= _HEAD_BYTES:
                _check_encoding(head, name)
                checked = True
        if not count and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line.endswith(b"\n"):
            line = line[:-1]
        count += 1
        yield line[:-1] if line.endswith(b"\r") else line
    if not checked:
        _check_encoding(head, name)


_HEAD_BYTES = 4096


def _check_encoding(head: bytes, name: str) -> None:
    encoding = wide_encoding(head[:_HEAD_BYTES])
    if encoding is not None:
        raise NmtError(f"{name}: {encoding} text, not UTF-8; {conversion_hint(name, encoding)}")
    if problem := binary_problem(head[:_HEAD_BYTES]):
        raise NmtError(f"{name}: {problem}")


def read_text_lines(path: Path) -> list[bytes]:
    """Every line of :func:`text_lines`, as a list."""
    return list(text_lines(path))


def text_lines(path: Path) -> Iterator[bytes]:
    """The raw lines of a text file, gzipped or not (by its first bytes), one at a time; a
    clear error naming the file when it cannot be read."""
    if not path.exists():
        raise NmtError(f"{path}: no such file")
    if path.is_dir():
        raise NmtError(f"{path}: is a directory, expected a text file")
    try:
        with open(path, "rb") as raw:
            gzipped = raw.peek(2)[:2] == b"\x1f\x8b" if hasattr(raw, "peek") else False
            with (gzip.open(raw, "rb") if gzipped else contextlib.nullcontext(raw)) as f:
                yield from iter_lines(f, str(path))
    except (OSError, EOFError, zlib.error) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise NmtError(f"{path}: cannot read ({reason})") from None


def _decode(raw: bytes, line_no: int, report: ReadReport) -> str | None:
    if len(raw) > MAX_LINE_CHARS * 4:
        report.skip("over-long lines", line_no)
        return None
    if b"\0" in raw:  # valid UTF-8, but no sentence: binary data
        report.skip("NUL bytes", line_no)
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        report.skip("invalid UTF-8", line_no)
        return None


def _keep(src: str, tgt: str, line_no: int, report: ReadReport) -> bool:
    if not src or not tgt:
        report.skip("empty side", line_no)
        return False
    if max(len(src), len(tgt)) > MAX_LINE_CHARS:
        report.skip("over-long lines", line_no)
        return False
    report.kept += 1
    return True


def tsv_pairs(path: Path, report: ReadReport) -> Iterator[tuple[str, str]]:
    """The usable, normalised ``SRC<TAB>TGT[<TAB>anything]`` pairs of a file (the fra-eng
    format), one at a time; what is skipped, and why, goes into ``report``."""
    for line_no, raw in enumerate(text_lines(path), start=1):
        text = _decode(raw, line_no, report)
        if text is None:
            continue
        cols = text.split("\t")
        if len(cols) < 2:
            report.skip("lines without a tab", line_no)
            continue
        src, tgt = normalize(cols[0]), normalize(cols[1])
        if _keep(src, tgt, line_no, report):
            yield src, tgt


def aligned_pairs(src_path: Path, tgt_path: Path, report: ReadReport) -> Iterator[tuple[str, str]]:
    """The usable, normalised pairs of two aligned files, one at a time; files of different
    lengths are refused when the shorter one ends."""
    src_lines, tgt_lines = text_lines(src_path), text_lines(tgt_path)
    for line_no, (raw_src, raw_tgt) in enumerate(itertools.zip_longest(src_lines, tgt_lines), start=1):
        if raw_src is None or raw_tgt is None:
            n_src = line_no - (raw_src is None) + sum(1 for _ in src_lines)
            n_tgt = line_no - (raw_tgt is None) + sum(1 for _ in tgt_lines)
            raise NmtError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; aligned files need "
                           "equal line counts")
        src, tgt = _decode(raw_src, line_no, report), None
        if src is not None:
            tgt = _decode(raw_tgt, line_no, report)
        if tgt is not None:
            src, tgt = normalize(src), normalize(tgt)
            if _keep(src, tgt, line_no, report):
                yield src, tgt


def read_tsv(path: Path, strict: bool = False) -> tuple[list[tuple[str, str]], ReadReport]:
    """Read ``SRC<TAB>TGT[<TAB>anything]`` lines (fra-eng format), normalised."""
    report = ReadReport(str(path))
    return finish(list(tsv_pairs(path, report)), report, strict)


def read_parallel(src_path: Path, tgt_path: Path, strict: bool = False
                  ) -> tuple[list[tuple[str, str]], ReadReport]:
    """Read two aligned files, one sentence per line, normalised."""
    return finish(*parallel_pairs(src_path, tgt_path), strict)


def parallel_pairs(src_path: Path, tgt_path: Path) -> tuple[list[tuple[str, str]], ReadReport]:
    """The usable, normalised pairs of two aligned files, and what was skipped."""
    report = ReadReport(f"{src_path} + {tgt_path}")
    return list(aligned_pairs(src_path, tgt_path, report)), report


def finish(pairs: list[tuple[str, str]], report: ReadReport, strict: bool
           ) -> tuple[list[tuple[str, str]], ReadReport]:
    """``pairs`` and ``report`` once reading is done: skips are an error with ``strict``, else a
    warning; no pair at all is an error."""
    check_report(report, strict, bool(pairs))
    return pairs, report


def check_report(report: ReadReport, strict: bool, any_pairs: bool) -> None:
    """What reading ``report``'s file ended in: skips refused with ``strict``, else a warning;
    no usable pair, an error."""
    if report.skipped:
        if strict:
            raise SettingError("strict", None, report.summary())
        log.warning(report.summary())
    if not any_pairs:
        raise NmtError(f"{report.path}: no usable sentence pairs")
