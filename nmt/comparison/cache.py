"""Hypotheses decoded once: a system's output on a test set is kept in its run, under
``RUN/hypotheses/KEY.txt``, beside ``KEY.json`` which says what was decoded. KEY is a hash of
everything the output depends on (the test sources, the weights' and tokenizer's SHA-256,
the engine, precision, device and search settings), so a changed input is a new key, never a
stale hit. Written atomically; a cache that cannot be written (a read-only run) is skipped
with a warning, since it only saves time."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from nmt.inference.loading import HYPOTHESES as FOLDER  # passed over when the newest run is looked for
from nmt.runtime.fileio import atomic_write_lines, atomic_write_text

log = logging.getLogger(__name__)



def key_of(identity: dict) -> str:
    """The cache key of a decoding described by ``identity`` (JSON-serialisable)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def sha256_lines(lines: list[str]) -> str:
    """A test set's identity: the SHA-256 of its lines."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


class HypothesisCache:
    """The hypotheses kept in ``directory``/hypotheses/."""

    def __init__(self, directory: Path) -> None:
        self.folder = directory / FOLDER

    def get(self, identity: dict, count: int) -> list[str] | None:
        """The hypotheses decoded for ``identity``, or None when there are none (or not
        ``count`` of them, or their record says another decoding)."""
        key = key_of(identity)
        text, record = self.folder / f"{key}.txt", self.folder / f"{key}.json"
        try:
            if json.loads(record.read_text(encoding="utf-8")).get("identity") != identity:
                return None
            lines = text.read_text(encoding="utf-8").split("\n")
        except (OSError, ValueError):  # missing, unreadable or damaged: decode again
            return None
        if lines[-1:] == [""]:
            lines.pop()
        return lines if len(lines) == count else None

    def put(self, identity: dict, hyps: list[str]) -> None:
        """Keep ``hyps`` (one line each) for ``identity``; the text first, then the record
        that makes it a hit."""
        key = key_of(identity)
        try:
            self.folder.mkdir(exist_ok=True)
            atomic_write_lines(self.folder / f"{key}.txt", hyps)
            atomic_write_text(self.folder / f"{key}.json", json.dumps({"identity": identity}, indent=1) + "\n")
        except OSError as e:
            log.warning("%s: could not keep the hypotheses (%s); they will be decoded again next time",
                        self.folder, e.strerror or e)
