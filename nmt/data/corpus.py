"""Reading and normalising parallel text, and the deterministic held-out split."""
from __future__ import annotations

import hashlib
import io
import logging
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from nmt.encoding import conversion_hint, wide_encoding
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


def split_lines(data: bytes) -> list[bytes]:
    """Lines of a byte string without a UTF-8 BOM, newlines or CRs before them."""
    return read_lines(io.BytesIO(data), "text")


def read_lines(stream: BinaryIO, name: str, max_line_bytes: int = MAX_LINE_BYTES) -> list[bytes]:
    """The lines of a binary stream without a UTF-8 BOM, newlines or CRs before them.

    Read line by line with a cap, so an endless "line" (``/dev/zero``, a binary file) is
    refused after ``max_line_bytes`` instead of filling the memory. UTF-16 or UTF-32 text is
    refused from its first bytes (:func:`nmt.encoding.wide_encoding`).
    """
    lines: list[bytes] = []
    head, checked = b"", False  # the first bytes, until they are checked
    while line := stream.readline(max_line_bytes + 1):
        if len(line) > max_line_bytes:
            raise NmtError(f"{name}: line {len(lines) + 1} is longer than {max_line_bytes:,} bytes; "
                           f"not a text file of sentences")
        if not checked:
            head += line
            if len(head) >= _HEAD_BYTES:
                _check_encoding(head, name)
                checked = True
        if not lines and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line.endswith(b"\n"):
            line = line[:-1]
        lines.append(line[:-1] if line.endswith(b"\r") else line)
    if not checked:
        _check_encoding(head, name)
    return lines


_HEAD_BYTES = 4096


def _check_encoding(head: bytes, name: str) -> None:
    encoding = wide_encoding(head[:_HEAD_BYTES])
    if encoding is not None:
        raise NmtError(f"{name}: {encoding} text, not UTF-8; {conversion_hint(name, encoding)}")


def read_text_lines(path: Path) -> list[bytes]:
    """The raw lines of a text file; a clear error naming the file when it cannot be read."""
    if not path.exists():
        raise NmtError(f"{path}: no such file")
    if path.is_dir():
        raise NmtError(f"{path}: is a directory, expected a text file")
    try:
        with open(path, "rb") as f:
            return read_lines(f, str(path))
    except OSError as e:
        raise NmtError(f"{path}: cannot read ({e.strerror})") from None


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


def read_tsv(path: Path, strict: bool = False) -> tuple[list[tuple[str, str]], ReadReport]:
    """Read ``SRC<TAB>TGT[<TAB>anything]`` lines (fra-eng format), normalised."""
    report, pairs = ReadReport(str(path)), []
    for line_no, raw in enumerate(read_text_lines(path), start=1):
        text = _decode(raw, line_no, report)
        if text is None:
            continue
        cols = text.split("\t")
        if len(cols) < 2:
            report.skip("lines without a tab", line_no)
            continue
        src, tgt = normalize(cols[0]), normalize(cols[1])
        if _keep(src, tgt, line_no, report):
            pairs.append((src, tgt))
    return _finish(pairs, report, strict)


def read_parallel(src_path: Path, tgt_path: Path, strict: bool = False
                  ) -> tuple[list[tuple[str, str]], ReadReport]:
    """Read two aligned files, one sentence per line, normalised."""
    return _finish(*parallel_pairs(src_path, tgt_path), strict)


def parallel_pairs(src_path: Path, tgt_path: Path) -> tuple[list[tuple[str, str]], ReadReport]:
    """The usable, normalised pairs of two aligned files, and what was skipped."""
    src_lines, tgt_lines = read_text_lines(src_path), read_text_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise NmtError(f"{src_path} has {len(src_lines)} lines but {tgt_path} has "
                       f"{len(tgt_lines)}; aligned files need equal line counts")
    report, pairs = ReadReport(f"{src_path} + {tgt_path}"), []
    for line_no, (raw_src, raw_tgt) in enumerate(zip(src_lines, tgt_lines), start=1):
        src, tgt = _decode(raw_src, line_no, report), None
        if src is not None:
            tgt = _decode(raw_tgt, line_no, report)
        if tgt is not None and _keep(normalize(src), normalize(tgt), line_no, report):
            pairs.append((normalize(src), normalize(tgt)))
    return pairs, report


def _finish(pairs: list[tuple[str, str]], report: ReadReport, strict: bool
            ) -> tuple[list[tuple[str, str]], ReadReport]:
    if report.skipped:
        if strict:
            raise SettingError("strict", None, report.summary())
        log.warning(report.summary())
    if not pairs:
        raise NmtError(f"{report.path}: no usable sentence pairs")
    return pairs, report


@dataclass
class Split:
    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def split_by_source(pairs: list[tuple[str, str]], valid_size: int, test_size: int) -> Split:
    """Hold out whole groups of pairs that share a source sentence.

    Groups are ordered by a hash of their source, so the split depends on nothing but the
    text: not on line order or seed. Each held-out part gets at most a tenth of the groups.
    """
    sources = sorted({src for src, _ in pairs},
                     key=lambda s: hashlib.sha1(s.encode("utf-8")).digest())
    cap = len(sources) // 10
    n_test, n_valid = min(test_size, cap), min(valid_size, cap)
    test_src = set(sources[:n_test])
    valid_src = set(sources[n_test:n_test + n_valid])
    split = Split([], [], [])
    for pair in pairs:
        part = split.test if pair[0] in test_src else split.valid if pair[0] in valid_src else split.train
        part.append(pair)
    return split
