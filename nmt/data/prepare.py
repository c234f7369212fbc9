"""Turning a corpus into prepared data: read, split, train the tokenizer, encode, in passes
whose memory does not grow with the corpus. Done once per run (or once for many, ``nmt
prepare``); a resumed run, and every other rank, opens what was written.

A directory of prepared data holds ``spm.model``, ``valid.tsv`` and ``test.tsv`` (the held-out
pairs as text), the training pairs encoded flat (:mod:`nmt.data.store`: ``train.src`` and
``train.tgt``) and ``data.json`` (:class:`nmt.data.manifest.Manifest`).

The passes: the corpus is read, normalised and filtered once, into a temporary file of the
pairs kept; the held-out sources are chosen from it (:class:`nmt.data.split.HeldOut`); a second
read carves the held-out pairs and samples training sentences for SentencePiece
(:class:`nmt.data.sampling.Reservoir`); a third encodes the training pairs a chunk at a time.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import shutil
import urllib.request
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.config import DataConfig, RunConfig
from nmt.data.corpus import ReadReport, aligned_pairs, check_report, parallel_pairs, read_tsv, tsv_pairs
from nmt.data.manifest import MANIFEST, Manifest, fingerprint
from nmt.data.sampling import Reservoir
from nmt.data.split import HeldOut
from nmt.data.store import StoreWriter, TokenStore
from nmt.data.tokenizer import SPECIALS, Tokenizer
from nmt.errors import NmtError, SettingError, SettingMessage
from nmt.runtime.fileio import atomic_path, atomic_write_lines

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path("data/fra-eng/fra.txt")
FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"
ENCODE_CHUNK = 10_000  # pairs encoded at once


def side_pieces(ids: Iterable[int]) -> list[int]:
    """The sorted distinct ``ids`` plus the special pieces (PAD first, at row 0): the pieces
    one side of the model has rows for (see :mod:`nmt.models.pieces`)."""
    return sorted(set(SPECIALS).union(ids))


@dataclass
class RunData:
    """A run's tokenizer, encoded training pairs (memory-mapped), raw held-out pairs, and the
    manifest that says what they hold."""

    tokenizer: Tokenizer
    train_src: TokenStore
    train_tgt: TokenStore
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]
    manifest: Manifest

    @property
    def source_pieces(self) -> list[int]:
        """Ids the encoder has rows for: the specials and every piece of a training source."""
        return self.manifest.source_pieces

    @property
    def target_pieces(self) -> list[int]:
        """Ids the decoder reads and the generator scores: specials and training-target pieces."""
        return self.manifest.target_pieces

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


def corpus_pairs(cfg: DataConfig) -> tuple[Iterator[tuple[str, str]], ReadReport]:
    """The configured corpus's usable pairs, streamed, and the report they fill as they are
    read; the default corpus is fetched when it is absent."""
    if cfg.src_file is not None:
        report = ReadReport(f"{cfg.src_file} + {cfg.tgt_file}")
        return aligned_pairs(Path(cfg.src_file), Path(cfg.tgt_file), report), report
    path = Path(cfg.corpus) if cfg.corpus else DEFAULT_CORPUS
    if cfg.corpus is None and not path.exists():
        download_fra_eng(path)
    report = ReadReport(str(path))
    return tsv_pairs(path, report), report


def read_corpus(cfg: DataConfig, strict: bool = False) -> tuple[list[tuple[str, str]], ReadReport]:
    """Every usable pair of the configured corpus, in memory (for small corpora and tools)."""
    pairs, report = corpus_pairs(cfg)
    pairs = list(pairs)
    check_report(report, strict, bool(pairs))
    return pairs, report


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


# --- the passes -----------------------------------------------------------------------

@contextmanager
def _kept_pairs(cfg: DataConfig, directory: Path, strict: bool, corpus_limit: int | None
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


def _read_kept(path: Path) -> Iterator[tuple[str, str]]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            src, tgt = line[:-1].split("\t")
            yield src, tgt


def _held_out_sets(cfg: DataConfig, kept: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]],
                                                            HeldOut, dict[str, tuple[int, int]]]:
    """The validation and test pairs, given or carved (those carved are filled in by the next
    pass), the sources to carve, and each set's overlap with the corpus."""
    given = {part: read_given_set(cfg, part) for part in ("valid", "test") if getattr(cfg, f"{part}_src")}
    sizes = {part: 0 if part in given else getattr(cfg, f"{part}_size") for part in ("valid", "test")}
    held_out = HeldOut.choose((src for src, _ in _read_kept(kept)), sizes["valid"], sizes["test"])
    overlap = held_out_overlap(given, (src for src, _ in _read_kept(kept)))
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


def _carve(kept: Path, held_out: HeldOut, valid: list, test: list, sample_size: int
           ) -> tuple[int, Reservoir]:
    """Append the carved held-out pairs to ``valid`` and ``test``; count the training pairs and
    sample them for SentencePiece (``sample_size`` pairs, in corpus order while they all fit)."""
    sample: Reservoir = Reservoir(sample_size, seed=0)
    train = 0
    carved = {"valid": valid, "test": test}
    for pair in _read_kept(kept):
        part = held_out.part(pair[0])
        if part == "train":
            train += 1
            sample.offer(pair)
        else:
            carved[part].append(pair)
    return train, sample


def _encode(kept: Path, held_out: HeldOut, tokenizer: Tokenizer, directory: Path, max_pieces: int
            ) -> tuple[int, list[int], list[int]]:
    """Encode the training pairs of 1 to ``max_pieces`` pieces a side into the stores
    ``train.src`` and ``train.tgt``, a chunk at a time; returns how many were dropped as too
    long, and the pieces each side uses."""
    vocab = tokenizer.vocab_size
    seen = {side: np.zeros(vocab, dtype=bool) for side in ("src", "tgt")}
    dropped = 0
    with StoreWriter(directory, "train.src", vocab) as src_out, StoreWriter(directory, "train.tgt", vocab) as tgt_out:
        chunk: list[tuple[str, str]] = []
        for pair in _read_kept(kept):
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


# --- preparing and opening ------------------------------------------------------------

def prepare_run_data(cfg: DataConfig, directory: Path, strict: bool = False, corpus_limit: int | None = None,
                     tokenizer: Tokenizer | None = None) -> RunData:
    """Read and split the corpus, train the tokenizer, encode the training pairs, and write
    it all into ``directory`` (the files of the module's docstring). With ``tokenizer``, the
    directory's own (a run an older nmt prepared without data.json), its held-out files are
    checked, not written, and only the encoded pairs and data.json are added."""
    with _kept_pairs(cfg, directory, strict, corpus_limit) as (kept, report):
        valid, test, held_out, overlap = _held_out_sets(cfg, kept)
        check_overlap(overlap, cfg.allow_overlap)
        train, sample = _carve(kept, held_out, valid, test, cfg.spm_sample // 2)
        for part, pairs in (("valid", valid), ("test", test)):
            if not getattr(cfg, f"{part}_src"):  # carved
                _warn_if_short(cfg, f"{part}_size", len({src for src, _ in pairs}),
                               "a held-out set takes at most a tenth of the corpus's distinct source sentences")
        log.info("%s: %d training, %d validation, %d test pairs", report.path, train, len(valid), len(test))
        if not train:
            raise NmtError(f"{report.path}: no training pairs left after the held-out split")
        if tokenizer is None:
            _write_held_out(directory, valid, test)
            tokenizer = _train_tokenizer(cfg, sample, directory)
        else:  # a run prepared by an nmt before data.json: its split must come out the same
            _check_same_split(directory, valid, test, report.path)
        del sample
        dropped, source_pieces, target_pieces = _encode(kept, held_out, tokenizer, directory, cfg.max_pieces)
    if dropped:
        log.info("dropped %d training pairs longer than %d pieces", dropped, cfg.max_pieces)
    if dropped == train:
        raise NmtError(f"{report.path}: no training pairs left after the held-out split")
    manifest = Manifest(
        sources={name: fingerprint(Path(path)) for name, path in absolute_sources(cfg).items()},
        corpus=report.path,
        pairs={"read": report.kept, "skipped": dict(report.skipped), "train": train - dropped,
               "dropped_long": dropped, "valid": len(valid), "test": len(test)},
        held_out_overlap={part: {"sources": total, "in_training_corpus": shared}
                          for part, (shared, total) in overlap.items()},
        tokenizer_sha256=tokenizer.sha256, vocab_size=tokenizer.vocab_size, source_pieces=source_pieces,
        target_pieces=target_pieces, settings=_settings(cfg))
    manifest.save(directory)
    return open_run_data(directory, tokenizer)


def _write_held_out(directory: Path, valid: list[tuple[str, str]], test: list[tuple[str, str]]) -> None:
    atomic_write_lines(directory / "valid.tsv", [f"{s}\t{t}" for s, t in valid])
    atomic_write_lines(directory / "test.tsv", [f"{s}\t{t}" for s, t in test])


def _check_same_split(directory: Path, valid: list[tuple[str, str]], test: list[tuple[str, str]],
                      source: str) -> None:
    for name, pairs in (("valid.tsv", valid), ("test.tsv", test)):
        if read_pairs(directory / name) != pairs:
            raise NmtError(f"{source}: not the data this run started with (its held-out {name} differs); "
                           "resume with the original corpus and held-out files")


def _train_tokenizer(cfg: DataConfig, sample: Reservoir, directory: Path) -> Tokenizer:
    """SentencePiece on the sampled training pairs' sources, then targets."""
    if sample.offered > len(sample.items):
        log.info("SentencePiece trains on %d of the %d training pairs, drawn at random", len(sample.items),
                 sample.offered)
    texts = [s for s, _ in sample.items] + [t for _, t in sample.items]
    tokenizer = Tokenizer.train(texts, directory / "spm.model", cfg.vocab_size)
    _warn_if_short(cfg, "vocab_size", tokenizer.vocab_size, "a unigram vocabulary ends where its text has no "
                   "more pieces worth keeping")
    return tokenizer


def _settings(cfg: DataConfig) -> dict:
    """The data settings that shape prepared data (not which files: those are fingerprinted)."""
    return {name: getattr(cfg, name) for name in ("valid_size", "test_size", "max_pieces", "vocab_size",
                                                  "spm_sample", "allow_overlap")}


def open_run_data(directory: Path, tokenizer: Tokenizer | None = None) -> RunData:
    """The prepared data in ``directory``, opened read-only; the stores memory-mapped."""
    manifest = Manifest.load(directory)
    tokenizer = tokenizer or Tokenizer(directory / "spm.model")
    if tokenizer.sha256 != manifest.tokenizer_sha256:
        raise NmtError(f"{directory / 'spm.model'}: not the tokenizer the data was encoded with; prepare "
                       "the data again")
    train_src, train_tgt = TokenStore.open(directory, "train.src"), TokenStore.open(directory, "train.tgt")
    if len(train_src) != len(train_tgt) or len(train_src) != manifest.pairs["train"]:
        raise NmtError(f"{directory}: the encoded training pairs do not match data.json; prepare the data again")
    return RunData(tokenizer, train_src, train_tgt, read_pairs(directory / "valid.tsv"),
                   read_pairs(directory / "test.tsv"), manifest)


def check_run_data(cfg: DataConfig, run_dir: Path) -> None:
    """Refuse a run's data when what it came from changed since it was prepared: the files, for
    data prepared in the run; the data's data.json, for prepared data it was given (``data``)."""
    if cfg.data is None:
        Manifest.load(run_dir).check_sources(absolute_sources(cfg), "this run started with")
    elif manifest_sha256(Path(cfg.data)) != cfg.data_sha256:
        raise SettingError("data", cfg.data, "not the data this run started with (its data.json changed); "
                           "resume with the data it started with")


def data_dir(cfg: DataConfig, run_dir: Path) -> Path:
    """Where a run's prepared data is: given to it (``data``), or in the run itself."""
    return Path(cfg.data) if cfg.data is not None else run_dir


def manifest_sha256(directory: Path) -> str:
    return fingerprint(directory / MANIFEST)["sha256"]


def adopt_prepared(cfg: DataConfig) -> DataConfig:
    """``cfg`` for training on the prepared data ``cfg.data``: its files and settings as its
    data.json records them, and that file's SHA-256. A setting given that differs from the
    data's is refused: the data would have to be prepared again."""
    directory = Path(cfg.data).resolve()
    manifest = Manifest.load(directory)
    prepared = {name: None for name in DataConfig.FILES} | {name: record["path"] for name, record in
                                                           manifest.sources.items()} | manifest.settings
    for name in DataConfig.PREPARED:
        given, recorded = getattr(cfg, name), prepared.get(name, getattr(DataConfig, name))
        same = (given == recorded or (given is not None and recorded is not None and name in DataConfig.FILES
                                      and Path(given).resolve() == Path(recorded)))
        if given != getattr(DataConfig, name) and not same:
            raise SettingError(name, given, f"{{data}} {directory} was prepared with {recorded}; prepare it "
                               "again (nmt prepare) to change it", ("data",))
    return dataclasses.replace(cfg, **{name: prepared.get(name, getattr(DataConfig, name))
                                       for name in DataConfig.PREPARED},
                               data=str(directory), data_sha256=manifest_sha256(directory))


def prepare_data_dir(cfg: DataConfig, out: Path, strict: bool = False) -> RunData:
    """``nmt prepare``: ``cfg``'s data, prepared into the new directory ``out``, whole or not at
    all (it is built beside ``out`` and renamed into place)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SettingError("output", out, "exists and is not empty; choose another directory")
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        partial.mkdir(parents=True)
    except OSError as e:
        raise SettingError("output", out, f"cannot create ({e.strerror})") from None
    try:
        prepare_run_data(cfg, partial, strict)
        if out.exists():
            out.rmdir()
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return open_run_data(out)


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


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """Read a held-out split file written by :func:`prepare_run_data`."""
    if not path.is_file():
        raise NmtError(f"{path}: missing from the run directory")
    if path.stat().st_size == 0:  # a run held nothing out
        return []
    pairs, _ = read_tsv(path, strict=True)
    return pairs
