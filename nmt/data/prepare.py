"""Turning a corpus into a run's data: read, split, train the tokenizer, encode. Done once per run."""
from __future__ import annotations

import hashlib
import io
import logging
import random
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from nmt.config import DataConfig, RunConfig
from nmt.data.corpus import ReadReport, Split, parallel_pairs, read_parallel, read_tsv, split_by_source
from nmt.data.sequences import Sequences
from nmt.data.tokenizer import SPECIALS, Tokenizer
from nmt.errors import NmtError, SettingError, SettingMessage
from nmt.runtime.fileio import atomic_path, atomic_write_lines

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path("data/fra-eng/fra.txt")
FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"


def side_pieces(ids: Iterable[int]) -> list[int]:
    """The sorted distinct ``ids`` plus the special pieces (PAD first, at row 0): the pieces
    one side of the model has rows for (see :mod:`nmt.models.pieces`)."""
    return sorted(set(SPECIALS).union(ids))


@dataclass
class RunData:
    """A run's tokenizer, encoded training pairs and raw held-out pairs; ``overlap``: for the
    validation and test sets, (their sources also among the training sources, their sources)."""

    tokenizer: Tokenizer
    train_src: Sequences
    train_tgt: Sequences
    split: Split
    report: ReadReport
    dropped_long: int
    overlap: dict[str, tuple[int, int]]

    @cached_property
    def source_pieces(self) -> list[int]:
        """Ids the encoder has rows for: the specials and every piece of a training source."""
        return side_pieces(self.train_src.distinct())

    @cached_property
    def target_pieces(self) -> list[int]:
        """Ids the decoder reads and the generator scores: specials and training-target pieces."""
        return side_pieces(self.train_tgt.distinct())

    def sized(self, config: RunConfig) -> RunConfig:
        """``config`` with the vocabulary and each side's piece count of this data."""
        return config.replace(vocab=self.tokenizer.vocab_size, source_pieces=len(self.source_pieces),
                              target_pieces=len(self.target_pieces),
                              tokenizer_sha256=self.tokenizer.sha256)


def download_fra_eng(target: Path) -> None:
    """Fetch the d2l.ai fra-eng archive, verify its SHA-1 and extract fra.txt + _about.txt."""
    log.info("%s is missing; downloading %s", target, FRA_ENG_URL)
    try:
        with urllib.request.urlopen(FRA_ENG_URL, timeout=30) as response:
            data = response.read()
    except OSError as e:
        raise SettingError(
            None, None, f"{target}: corpus not found, and downloading {FRA_ENG_URL} failed ({e}). "
            f"Put the Tatoeba fra-eng file there (EN<TAB>FR per line; unpack fra-eng.zip from "
            f"that URL on a machine with internet), or pass {{corpus}} FILE, or {{src_file}} FILE "
            f"{{tgt_file}} FILE for two aligned plain-text files.", ("corpus", "src_file", "tgt_file")) from None
    digest = hashlib.sha1(data).hexdigest()
    if digest != FRA_ENG_SHA1:
        raise NmtError(f"{FRA_ENG_URL}: SHA-1 {digest} is not the expected {FRA_ENG_SHA1}; "
                       f"not using it")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in ("fra.txt", "_about.txt"):
            with atomic_path(target.parent / name) as tmp:
                tmp.write_bytes(archive.read(f"fra-eng/{name}"))


def read_corpus(cfg: DataConfig, strict: bool = False) -> tuple[list[tuple[str, str]], ReadReport]:
    """Read the configured corpus, fetching the default one when it is absent."""
    if cfg.src_file is not None:
        return read_parallel(Path(cfg.src_file), Path(cfg.tgt_file), strict)
    path = Path(cfg.corpus) if cfg.corpus else DEFAULT_CORPUS
    if cfg.corpus is None and not path.exists():
        download_fra_eng(path)
    return read_tsv(path, strict)


def absolute_sources(cfg: DataConfig) -> dict[str, str]:
    """The corpus paths made absolute, so a resumed run finds them from any directory."""
    paths = cfg.files()
    if cfg.src_file is None:
        paths["corpus"] = str(cfg.corpus or DEFAULT_CORPUS)
    return {key: str(Path(path).resolve()) for key, path in paths.items()}


def read_given_set(cfg: DataConfig, part: str) -> list[tuple[str, str]]:
    """The validation or test set (``part``) given as two aligned files: every line must be a
    usable pair, so its segments are the files' lines, as published."""
    src, tgt = getattr(cfg, f"{part}_src"), getattr(cfg, f"{part}_tgt")
    pairs, report = parallel_pairs(Path(src), Path(tgt))
    what = "validation" if part == "valid" else "test"
    if not report.skipped and not pairs:
        raise SettingError(f"{part}_src", src, f"empty (with {{{part}_tgt}} {tgt}); a {what} set needs "
                           "at least one pair", (f"{part}_tgt",))
    if report.skipped:
        raise NmtError(f"{report.summary()}: a {what} set needs a usable pair on every line")
    return pairs


def split_corpus(cfg: DataConfig, pairs: list[tuple[str, str]]) -> Split:
    """The held-out split: given validation and test files where there are, the rest carved
    from the corpus by source sentence (:func:`split_by_source`)."""
    valid = read_given_set(cfg, "valid") if cfg.valid_src else None
    test = read_given_set(cfg, "test") if cfg.test_src else None
    split = split_by_source(pairs, 0 if valid is not None else cfg.valid_size,
                            0 if test is not None else cfg.test_size)
    for part, carved, given in (("valid", split.valid, valid), ("test", split.test, test)):
        if given is None:
            _warn_if_short(cfg, f"{part}_size", len({src for src, _ in carved}),
                           "a held-out set takes at most a tenth of the corpus's distinct source sentences")
    return Split(split.train, valid if valid is not None else split.valid,
                 test if test is not None else split.test)


def held_out_overlap(cfg: DataConfig, corpus: list[tuple[str, str]], split: Split) -> dict[str, tuple[int, int]]:
    """For the validation and the test set: how many of their distinct sources also occur as a
    source of the training corpus, and how many there are. A set held out of the corpus shares
    none (the split is by source sentence); a given one may share any (a training file itself)."""
    parts = {"valid": {s for s, _ in split.valid}, "test": {s for s, _ in split.test}}
    given = {part for part in parts if getattr(cfg, f"{part}_src")}
    shared: dict[str, set[str]] = {part: set() for part in parts}
    for src, _ in corpus if given else ():
        for part in given:
            if src in parts[part]:
                shared[part].add(src)
    return {part: (len(shared[part]), len(parts[part])) for part in parts}


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


def _warn_if_short(cfg: DataConfig, name: str, got: int, why: str) -> None:
    """Warn that the data gives less of ``name`` than the user asked for (a default that the
    data cannot give is no one's request: a small corpus simply gets less)."""
    asked = getattr(cfg, name)
    if asked != getattr(DataConfig, name) and got < 0.95 * asked:
        log.warning(SettingMessage(name, asked, f"{why}: this corpus gives {got:,}"))


def _check_same_split(run_dir: Path, split: Split, source: str) -> None:
    for name, pairs in (("valid.tsv", split.valid), ("test.tsv", split.test)):
        if read_pairs(run_dir / name) != pairs:
            raise NmtError(f"{source}: not the data this run started with (its held-out "
                           f"{name} differs); resume with the original corpus and held-out files")


def _write_pairs(path: Path, pairs: list[tuple[str, str]]) -> None:
    atomic_write_lines(path, [f"{src}\t{tgt}" for src, tgt in pairs])


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """Read a held-out split file written by :func:`prepare_run_data`."""
    if not path.is_file():
        raise NmtError(f"{path}: missing from the run directory")
    if path.stat().st_size == 0:  # a run held nothing out
        return []
    pairs, _ = read_tsv(path, strict=True)
    return pairs


def prepare_run_data(cfg: DataConfig, run_dir: Path, strict: bool = False,
                     tokenizer: Tokenizer | None = None, corpus_limit: int | None = None) -> RunData:
    """Read and split the corpus; for a new run train the tokenizer and save split and model.

    A resumed run passes the run's own ``tokenizer`` (its ``spm.model``); the split is a pure
    function of the corpus, so it comes out the same. ``corpus_limit`` keeps a fixed random
    sample of that many pairs (fra.txt is sorted by length, so its head is not representative).
    """
    pairs, report = read_corpus(cfg, strict)
    if corpus_limit is not None and corpus_limit < len(pairs):
        pairs = random.Random(0).sample(pairs, corpus_limit)
    split = split_corpus(cfg, pairs)
    overlap = held_out_overlap(cfg, pairs, split)
    check_overlap(overlap, cfg.allow_overlap)
    log.info("%s: %d training, %d validation, %d test pairs", report.path, len(split.train),
             len(split.valid), len(split.test))
    if tokenizer is None:
        _write_pairs(run_dir / "valid.tsv", split.valid)
        _write_pairs(run_dir / "test.tsv", split.test)
        texts = [s for s, _ in split.train] + [t for _, t in split.train]
        tokenizer = Tokenizer.train(texts, run_dir / "spm.model", cfg.vocab_size)
        _warn_if_short(cfg, "vocab_size", tokenizer.vocab_size, "a unigram vocabulary ends where its "
                       "text has no more pieces worth keeping")
    else:
        _check_same_split(run_dir, split, report.path)
    train_src, train_tgt, dropped = _encode_pairs(tokenizer, split.train, cfg.max_pieces)
    if dropped:
        log.info("dropped %d training pairs longer than %d pieces", dropped, cfg.max_pieces)
    if not train_src:
        raise NmtError(f"{report.path}: no training pairs left after the held-out split")
    return RunData(tokenizer, train_src, train_tgt, split, report, dropped, overlap)


def _encode_pairs(tokenizer: Tokenizer, pairs: list[tuple[str, str]], max_pieces: int,
                  chunk: int = 10_000) -> tuple[Sequences, Sequences, int]:
    """Piece ids of the pairs with 1 to ``max_pieces`` pieces a side, and how many were not;
    encoded a chunk at a time, so the corpus never exists as Python lists of ints."""
    src_ids, tgt_ids, dropped = Sequences(), Sequences(), 0
    for start in range(0, len(pairs), chunk):
        part = pairs[start:start + chunk]
        src = tokenizer.encode([s for s, _ in part])
        tgt = tokenizer.encode([t for _, t in part])
        keep = [i for i in range(len(part))
                if 0 < len(src[i]) <= max_pieces and 0 < len(tgt[i]) <= max_pieces]
        src_ids.extend(src[i] for i in keep)
        tgt_ids.extend(tgt[i] for i in keep)
        dropped += len(part) - len(keep)
    return src_ids, tgt_ids, dropped
