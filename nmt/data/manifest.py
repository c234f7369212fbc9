"""What prepared data holds and where it came from (``data.json``): each source file's size and
SHA-256, the pair counts, what was skipped and why, the held-out sets' overlap with the corpus,
the tokenizer's fingerprint and the pieces each side of a model needs rows for.

A run's data is checked against it instead of being read again: ``--resume`` refuses a corpus
whose fingerprint changed, and never re-encodes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmt.errors import NmtError
from nmt.runtime.fileio import atomic_write_text

MANIFEST = "data.json"
FORMAT = 2  # 2: several corpora and their ranges


def fingerprint(path: Path) -> dict[str, Any]:
    """``path`` (absolute), and its :func:`content`."""
    return {"path": str(Path(path).resolve()), **content(path)}


def content(path: Path) -> dict[str, Any]:
    """``path``'s size and SHA-256, read a megabyte at a time."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except OSError as e:
        raise NmtError(f"{path}: cannot read ({e.strerror})") from None
    return {"bytes": size, "sha256": digest.hexdigest()}


@dataclass
class Manifest:
    """The record of prepared data. ``sources``: each data file's :func:`fingerprint`, by the
    setting that names it (``corpus``, ``valid_src``, ...); ``corpus``: the corpora as reports
    name them; ``corpora``: each one's path, weight, pairs read and kept for training, and where
    its training pairs start in the stores (they are a range); ``pairs``: counts (read, skipped
    by reason, duplicates, train, dropped_long, dropped_ratio, valid, test);
    ``held_out``: the size and SHA-256 of the directory's valid.tsv and test.tsv (older data has
    none: their pair counts are checked); ``held_out_overlap``: per held-out set, its distinct sources and how many the corpus also
    has; ``source_pieces``/``target_pieces``: the ids each side has rows for."""

    sources: dict[str, dict[str, Any]]
    corpus: str
    corpora: list[dict[str, Any]]
    pairs: dict[str, Any]
    held_out_overlap: dict[str, dict[str, int]]
    tokenizer_sha256: str
    vocab_size: int
    source_pieces: list[int]
    target_pieces: list[int]
    settings: dict[str, Any] = field(default_factory=dict)  # the data settings it was prepared with
    held_out: dict[str, dict[str, Any]] = field(default_factory=dict)  # valid.tsv's, test.tsv's bytes and sha256
    format: int = FORMAT

    def save(self, directory: Path) -> None:
        atomic_write_text(directory / MANIFEST, json.dumps(dataclasses.asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        if not directory.is_dir():
            raise NmtError(f"{directory}: {'not a directory' if directory.exists() else 'no such directory'}; "
                           "--data takes a directory made by nmt prepare -o DIR")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            manifest = cls(**raw)
        except FileNotFoundError:
            raise NmtError(f"{path}: missing; the data was not prepared, or not by this nmt") from None
        except (OSError, ValueError, TypeError) as e:
            raise NmtError(f"{path}: damaged data manifest ({type(e).__name__}: {e})") from None
        if manifest.format != FORMAT:
            raise NmtError(f"{path}: data format {manifest.format}, but this nmt reads format {FORMAT}")
        return manifest

    def check_held_out(self, directory: Path, name: str, pairs: int) -> None:
        """Refuse ``directory``'s held-out file ``name`` (of ``pairs`` pairs) when it is not the
        one prepared."""
        recorded, part = self.held_out.get(name), name.split(".")[0]
        changed = (recorded is not None and content(directory / name) != recorded) or pairs != self.pairs.get(part, pairs)
        if changed:
            raise NmtError(f"{directory / name}: not the held-out set {MANIFEST} records (changed since it was "
                           "prepared); prepare the data again")

    def check_sources(self, files: dict[str, str], what: str) -> None:
        """Refuse when a data file in ``files`` (setting: path) differs from the one prepared:
        another file, or the same one changed."""
        for name, path in files.items():
            recorded = self.sources.get(name)
            now = fingerprint(Path(path)) if Path(path).exists() else None
            if recorded is None or now is None or now["sha256"] != recorded["sha256"]:
                change = "missing" if now is None else "not the file prepared" if recorded is None else "changed"
                raise NmtError(f"{path}: not the data {what} (its {name} is {change} since it was prepared); "
                               "use the original files")
