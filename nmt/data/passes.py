"""The passes that turn a corpus into prepared data, each in memory bounded by the held-out
sets, the tokenizer's sample and a chunk of pairs, not by the corpus.

The corpus is read, normalised and filtered once, into a temporary file of the pairs kept
(:func:`kept_pairs`); the held-out sources are chosen from it (:func:`held_out_sets`); a second
read carves the held-out pairs and samples training pairs for SentencePiece (:func:`carve`); a
third encodes the training pairs a chunk at a time into the stores (:func:`encode`).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from nmt.config import DataConfig
from nmt.data.corpus import ReadReport, check_report
from nmt.data.sampling import Reservoir
from nmt.data.sources import corpus_pairs, read_given_set
from nmt.data.split import HeldOut
from nmt.data.store import StoreWriter
from nmt.data.tokenizer import SPECIALS, Tokenizer
from nmt.errors import SettingError

log = logging.getLogger(__name__)

ENCODE_CHUNK = 10_000  # pairs encoded at once


def side_pieces(ids: Iterable[int]) -> list[int]:
    """The sorted distinct ``ids`` plus the special pieces (PAD first, at row 0): the pieces
    one side of the model has rows for (see :mod:`nmt.models.pieces`)."""
    return sorted(set(SPECIALS).union(ids))


@contextmanager
def kept_pairs(cfg: DataConfig, directory: Path, strict: bool, corpus_limit: int | None
                ) -> Iterator[tuple[Path, ReadReport]]:
    """The corpus's usable pairs, normalised, in a temporary file of ``SRC<TAB>TGT`` lines in
    ``directory`` (deleted at the end), and the report of reading them. ``corpus_limit`` keeps
    a fixed random sample of that many pairs (fra.txt is sorted by length, so its head is not
    representative)."""
    pairs, report = corpus_pairs(cfg)
    if corpus_limit is not None:
        sample = Reservoir(corpus_limit, seed=0)
        for pair in pairs:
            sample.offer(pair)
        pairs = iter(sample.items)
    path = directory / ".pairs.tmp"
    try:
        kept = 0
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for src, tgt in pairs:
                f.write(f"{src}\t{tgt}\n")
                kept += 1
        check_report(report, strict, kept > 0)
        yield path, report
    finally:
        path.unlink(missing_ok=True)


def read_kept(path: Path) -> Iterator[tuple[str, str]]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            src, tgt = line[:-1].split("\t")
            yield src, tgt


def held_out_sets(cfg: DataConfig, kept: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]],
                                                            HeldOut, dict[str, tuple[int, int]]]:
    """The validation and test pairs, given or carved (those carved are filled in by the next
    pass), the sources to carve, and each set's overlap with the corpus."""
    given = {part: read_given_set(cfg, part) for part in ("valid", "test") if getattr(cfg, f"{part}_src")}
    sizes = {part: 0 if part in given else getattr(cfg, f"{part}_size") for part in ("valid", "test")}
    held_out = HeldOut.choose((src for src, _ in read_kept(kept)), sizes["valid"], sizes["test"])
    overlap = held_out_overlap(given, (src for src, _ in read_kept(kept)))
    return given.get("valid", []), given.get("test", []), held_out, overlap


def held_out_overlap(given: dict[str, list[tuple[str, str]]], corpus_sources: Iterable[str]
                     ) -> dict[str, tuple[int, int]]:
    """For the validation and the test set: how many of their distinct sources also occur as a
    source of the training corpus, and how many there are. A set held out of the corpus shares
    none (the split is by source sentence); a given one may share any (a training file itself).
    Only the given sets' sources are held in memory."""
    parts = {part: {s for s, _ in pairs} for part, pairs in given.items()}
    shared: dict[str, set[str]] = {part: set() for part in parts}
    for src in corpus_sources if parts else ():
        for part, sources in parts.items():
            if src in sources:
                shared[part].add(src)
    return {part: (len(shared.get(part, ())), len(parts.get(part, ()))) for part in ("valid", "test")}


def carve(kept: Path, held_out: HeldOut, valid: list, test: list, sample_size: int
           ) -> tuple[int, Reservoir]:
    """Append the carved held-out pairs to ``valid`` and ``test``; count the training pairs and
    sample them for SentencePiece (``sample_size`` pairs, in corpus order while they all fit)."""
    sample: Reservoir = Reservoir(sample_size, seed=0)
    train = 0
    carved = {"valid": valid, "test": test}
    for pair in read_kept(kept):
        part = held_out.part(pair[0])
        if part == "train":
            train += 1
            sample.offer(pair)
        else:
            carved[part].append(pair)
    return train, sample


def encode(kept: Path, held_out: HeldOut, tokenizer: Tokenizer, directory: Path, max_pieces: int
            ) -> tuple[int, list[int], list[int]]:
    """Encode the training pairs of 1 to ``max_pieces`` pieces a side into the stores
    ``train.src`` and ``train.tgt``, a chunk at a time; returns how many were dropped as too
    long, and the pieces each side uses."""
    vocab = tokenizer.vocab_size
    seen = {side: np.zeros(vocab, dtype=bool) for side in ("src", "tgt")}
    dropped = 0
    with StoreWriter(directory, "train.src", vocab) as src_out, StoreWriter(directory, "train.tgt", vocab) as tgt_out:
        chunk: list[tuple[str, str]] = []
        for pair in read_kept(kept):
            if held_out.part(pair[0]) == "train":
                chunk.append(pair)
            if len(chunk) == ENCODE_CHUNK:
                dropped += _encode_chunk(chunk, tokenizer, max_pieces, src_out, tgt_out, seen)
                chunk = []
        dropped += _encode_chunk(chunk, tokenizer, max_pieces, src_out, tgt_out, seen)
    return dropped, *(side_pieces(np.flatnonzero(seen[side]).tolist()) for side in ("src", "tgt"))


def _encode_chunk(chunk: list[tuple[str, str]], tokenizer: Tokenizer, max_pieces: int,
                  src_out: StoreWriter, tgt_out: StoreWriter, seen: dict[str, np.ndarray]) -> int:
    if not chunk:
        return 0
    src, tgt = tokenizer.encode([s for s, _ in chunk]), tokenizer.encode([t for _, t in chunk])
    keep = [i for i in range(len(chunk)) if 0 < len(src[i]) <= max_pieces and 0 < len(tgt[i]) <= max_pieces]
    for side, ids, out in (("src", src, src_out), ("tgt", tgt, tgt_out)):
        kept = [ids[i] for i in keep]
        out.extend(kept)
        for seq in kept:
            seen[side][seq] = True
    return len(chunk) - len(keep)


def share(part: int, whole: int) -> str:
    """``part`` of ``whole`` in whole percent, rounded down: 100% means all of it."""
    return f"{100 * part // whole}%"


def check_overlap(overlap: dict[str, tuple[int, int]], allow: bool) -> None:
    """Warn about held-out sources that training also has (their scores measure recall, not
    translation), naming the count and the share; refuse a set that training has whole."""
    for part, (shared, total) in overlap.items():
        if not shared:
            continue
        what = "validation" if part == "valid" else "test"
        said = (f"{shared:,} of {total:,} {what} sources ({share(shared, total)}) also occur in the training "
                f"corpus, so {what} scores measure how well the model recalls them, not how it translates")
        if shared == total and not allow:
            raise SettingError(f"{part}_src", None, said + "; give a held-out set, or {allow_overlap} to "
                               "train anyway", ("allow_overlap",))
        log.warning("%s", said)
