"""The passes that turn a corpus into prepared data, each in memory bounded by the held-out
sets, the tokenizer's sample and a chunk of pairs, not by the corpus.

The corpora are read, normalised and filtered once, into a temporary file of the pairs kept
(:func:`kept_pairs`, which may drop exact duplicates); the held-out sources are chosen from it
(:func:`held_out_sets`); a second read carves the held-out pairs and samples training pairs for
SentencePiece (:func:`carve`); a third encodes the training pairs a chunk at a time into the
stores (:func:`encode`), dropping those too long or too uneven.
"""
from __future__ import annotations

import logging
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.config import DataConfig
from nmt.data.corpus import ReadReport, check_report
from nmt.data.sampling import Reservoir
from nmt.data.sources import corpus_readers, read_given_set
from nmt.data.split import HeldOut
from nmt.data.store import TEXT, StoreWriter
from nmt.data.tokenizer import SPECIALS, Tokenizer
from nmt.errors import SettingError

log = logging.getLogger(__name__)

ENCODE_CHUNK = 10_000  # pairs encoded at once


def side_pieces(ids: Iterable[int]) -> list[int]:
    """The sorted distinct ``ids`` plus the special pieces (PAD first, at row 0): the pieces
    one side of the model has rows for (see :mod:`nmt.models.pieces`)."""
    return sorted(set(SPECIALS).union(ids))


@dataclass
class Kept:
    """The corpora's usable pairs, normalised, in a temporary file of ``CORPUS<TAB>SRC<TAB>TGT``
    lines (``CORPUS`` each corpus's number, from 0, in order), what reading each corpus skipped,
    and how many exact duplicates were dropped."""

    path: Path
    reports: list[ReadReport]
    duplicates: int = 0


@contextmanager
def kept_pairs(cfg: DataConfig, directory: Path, strict: bool, corpus_limit: int | None) -> Iterator[Kept]:
    """:class:`Kept` in ``directory`` (deleted at the end). ``corpus_limit`` keeps a fixed random
    sample of that many pairs (fra.txt is sorted by length, so its head is not
    representative); ``cfg.dedup`` drops exact duplicates, keeping the first."""
    readers = corpus_readers(cfg)
    pairs: Iterator[tuple[int, str, str]] = ((k, *pair) for k, (read, _) in enumerate(readers) for pair in read)
    if corpus_limit is not None:
        sample = Reservoir(corpus_limit, seed=0)
        for item in pairs:
            sample.offer(item)
        pairs = iter(sample.items)
    kept = Kept(directory / ".pairs.tmp", [report for _, report in readers])
    try:
        with open(kept.path, "w", encoding="utf-8", newline="\n") as f:
            for k, src, tgt in pairs:
                f.write(f"{k}\t{src}\t{tgt}\n")
        for report in kept.reports:
            check_report(report, strict, report.kept > 0)
        if cfg.dedup:
            kept.duplicates = _drop_duplicates(kept.path)
        yield kept
    finally:
        kept.path.unlink(missing_ok=True)


def _drop_duplicates(path: Path) -> int:
    """Rewrite ``path`` without the pairs that occurred before (in any corpus); returns how many.
    Memory: a 64-bit hash a pair, then NumPy's sort of them (about 24 bytes a pair at once)."""
    hashes = array("q")
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            hashes.append(hash(line[line.index("\t"):]))  # stable within this process, all it needs
    values = np.frombuffer(hashes, dtype=np.int64)
    first = np.zeros(len(values), dtype=bool)
    first[np.unique(values, return_index=True)[1]] = True
    del values, hashes
    tmp = path.with_name(path.name + ".dedup")
    with open(path, encoding="utf-8", newline="\n") as f, open(tmp, "w", encoding="utf-8", newline="\n") as out:
        out.writelines(line for line, keep in zip(f, first) if keep)
    tmp.replace(path)
    return int(len(first) - first.sum())


def read_kept(path: Path) -> Iterator[tuple[int, str, str]]:
    """The pairs of :class:`Kept`'s file: (corpus number, source, target)."""
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            k, src, tgt = line[:-1].split("\t")
            yield int(k), src, tgt


def held_out_sets(cfg: DataConfig, kept: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]],
                                                        HeldOut, dict[str, tuple[int, int]]]:
    """The validation and test pairs, given or carved (those carved are filled in by the next
    pass), the sources to carve, and each set's overlap with the corpus."""
    given = {part: read_given_set(cfg, part) for part in ("valid", "test") if getattr(cfg, f"{part}_src")}
    sizes = {part: 0 if part in given else getattr(cfg, f"{part}_size") for part in ("valid", "test")}
    tagged = set(cfg.tags())  # synthetic pairs: never held out
    held_out = HeldOut.choose((src for k, src, _ in read_kept(kept) if k not in tagged), sizes["valid"],
                              sizes["test"])
    overlap = held_out_overlap(given, (src for _, src, _ in read_kept(kept)))
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
          ) -> tuple[Counter, Reservoir]:
    """Append the carved held-out pairs to ``valid`` and ``test``; count each corpus's training
    pairs and sample them all for SentencePiece (``sample_size`` pairs, in corpus order while
    they all fit)."""
    sample: Reservoir = Reservoir(sample_size, seed=0)
    train: Counter = Counter()
    carved = {"valid": valid, "test": test}
    for k, src, tgt in read_kept(kept):
        part = held_out.part(src)
        if part == "train":
            train[k] += 1
            sample.offer((src, tgt))
        else:
            carved[part].append((src, tgt))
    return train, sample


@dataclass
class Encoded:
    """What :func:`encode` kept and dropped: each corpus's pairs in the stores (in order, so
    corpus k's are a range of them), those dropped as too long or too uneven, and the pieces
    each side uses."""

    pairs: Counter = field(default_factory=Counter)
    dropped_long: int = 0
    dropped_ratio: int = 0
    source_pieces: list[int] = field(default_factory=list)
    target_pieces: list[int] = field(default_factory=list)


def encode(kept: Path, held_out: HeldOut, tokenizer: Tokenizer, directory: Path, max_pieces: int,
           max_ratio: float = 0.0) -> Encoded:
    """Encode the training pairs of 1 to ``max_pieces`` pieces a side, whose sides' piece counts
    differ at most ``max_ratio`` times (0: any), into the stores ``train.src`` and
    ``train.tgt``, a chunk at a time; their text into ``train.src.text`` and ``train.tgt.text``,
    which subword sampling segments anew (:mod:`nmt.data.segmentation`)."""
    vocab = tokenizer.vocab_size
    seen = {side: np.zeros(vocab, dtype=bool) for side in ("src", "tgt")}
    result = Encoded()
    with (StoreWriter(directory, "train.src", vocab) as src_out, StoreWriter(directory, "train.tgt", vocab) as tgt_out,
          StoreWriter(directory, "train.src.text", vocab, TEXT) as src_text,
          StoreWriter(directory, "train.tgt.text", vocab, TEXT) as tgt_text):
        out = (src_out, tgt_out, src_text, tgt_text)
        chunk: list[tuple[int, str, str]] = []
        for item in read_kept(kept):
            if held_out.part(item[1]) == "train":
                chunk.append(item)
            if len(chunk) == ENCODE_CHUNK:
                _encode_chunk(chunk, tokenizer, max_pieces, max_ratio, out, seen, result)
                chunk = []
        _encode_chunk(chunk, tokenizer, max_pieces, max_ratio, out, seen, result)
    result.source_pieces, result.target_pieces = (side_pieces(np.flatnonzero(seen[side]).tolist())
                                                  for side in ("src", "tgt"))
    return result


def _encode_chunk(chunk: list[tuple[int, str, str]], tokenizer: Tokenizer, max_pieces: int, max_ratio: float,
                  out: tuple[StoreWriter, ...], seen: dict[str, np.ndarray], result: Encoded) -> None:
    if not chunk:
        return
    src, tgt = tokenizer.encode([s for _, s, _ in chunk]), tokenizer.encode([t for _, _, t in chunk])
    keep = []
    for i, (k, _, _) in enumerate(chunk):
        a, b = len(src[i]), len(tgt[i])
        if not (0 < a <= max_pieces and 0 < b <= max_pieces):
            result.dropped_long += 1
        elif max_ratio and max(a, b) > max_ratio * min(a, b):
            result.dropped_ratio += 1
        else:
            keep.append(i)
            result.pairs[k] += 1
    for side, ids, writer in (("src", src, out[0]), ("tgt", tgt, out[1])):
        kept = [ids[i] for i in keep]
        writer.extend(kept)
        for seq in kept:
            seen[side][seq] = True
    for column, writer in ((1, out[2]), (2, out[3])):
        writer.extend([chunk[i][column].encode("utf-8") for i in keep])


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
