"""Recognising text that is not UTF-8 but looks like text: UTF-16 and UTF-32, with or without a
byte-order mark, which editors on Windows and ``iconv -t utf-16`` write. Read as UTF-8 such a
file is a NUL byte between letters; it must be refused with the fix, not trained on."""
from __future__ import annotations

# Longest first: UTF-32 LE's mark begins with UTF-16 LE's.
_MARKS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
          (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def wide_encoding(head: bytes) -> str | None:
    """The encoding ``head`` (a file's first bytes) is in when that is UTF-16 or UTF-32: by its
    byte-order mark ("UTF-16"), or, without one, by where its NUL bytes fall ("UTF-16LE": the
    high byte of each Latin letter, after it; UTF-8 text has no NUL byte, and binary data
    has them anywhere); None otherwise. Without a mark, text in other scripts (Greek, CJK) has
    no NUL byte to tell: read as UTF-8, its lines are skipped as invalid."""
    for mark, name in _MARKS:
        if head.startswith(mark):
            return name
    if len(head) < 8 or not len(head) <= 4 * head.count(0) <= 3.5 * len(head):  # all NUL: binary data
        return None
    width = 4 if head.count(b"\x00\x00\x00") * 16 >= len(head) else 2
    little = sum(1 for k in range(width - 1, len(head), width) if head[k] == 0)  # each unit's high byte
    big = sum(1 for k in range(0, len(head), width) if head[k] == 0)
    if max(little, big) < 0.9 * len(head) // width:  # Latin text's NULs all fall on one side; data's anywhere
        return None
    name = f"UTF-{8 * width}{'LE' if little > big else 'BE'}"
    return name if _reads_as_text(head[:len(head) - len(head) % width], name) else None


def _reads_as_text(head: bytes, encoding: str) -> bool:
    """Whether ``head`` decodes in ``encoding`` to mostly printable characters: an ELF header's
    NULs fall like UTF-32's, but it decodes to control characters or to no characters at all."""
    try:
        text = head.decode(encoding.lower())
    except UnicodeDecodeError:
        return False
    return sum(c.isprintable() or c in "\t\n\r" for c in text) >= 0.95 * len(text)


def binary_problem(head: bytes) -> str | None:
    """Why ``head``, a file's first bytes, is binary data rather than text, or None. Text has
    few control bytes besides tab, newline and CR (a stray NUL in a line is the corpus reader's
    to skip), and UTF-16 or UTF-32 text, full of NULs, is :func:`wide_encoding`'s."""
    control = sum(head.count(b) for b in _CONTROL)
    if not head or control < 0.05 * len(head) or wide_encoding(head) is not None:
        return None
    return f"binary data, not text ({control / len(head):.0%} of its first {len(head):,} bytes are control bytes)"


_CONTROL = [*range(0, 9), 11, 12, *range(14, 32), 127]  # all but tab, newline and CR


def conversion_hint(name: object, encoding: str) -> str:
    """What to run to make the file (or stdin) ``name`` UTF-8."""
    iconv = f"iconv -f {encoding.lower()} -t utf-8"
    return f"pipe it through {iconv}" if name == "stdin" else f"convert it first: {iconv} {name} > {name}.utf8"
