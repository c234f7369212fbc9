"""Turning a corpus into prepared data: read, split, train the tokenizer, encode, in passes
whose memory does not grow with the corpus. Done once per run (or once for many, ``nmt
prepare``); a resumed run, and every other rank, opens what was written.

A directory of prepared data holds ``spm.model``, ``valid.tsv`` and ``test.tsv`` (the held-out
pairs as text), the training pairs encoded flat (:mod:`nmt.data.store`: ``train.src`` and
``train.tgt``) and ``data.json`` (:class:`nmt.data.manifest.Manifest`).

The passes that read and encode the corpus are :mod:`nmt.data.passes`; where its text comes
from, :mod:`nmt.data.sources`.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from nmt.config import DataConfig, RunConfig
from nmt.data.corpus import read_tsv
from nmt.data.manifest import MANIFEST, Manifest, fingerprint
from nmt.data.passes import carve, check_overlap, encode, held_out_sets, kept_pairs
from nmt.data.sampling import Reservoir
from nmt.data.sources import absolute_sources
from nmt.data.store import TokenStore
from nmt.data.tokenizer import Tokenizer
from nmt.errors import NmtError, SettingError, SettingMessage
from nmt.runtime.fileio import atomic_write_lines

log = logging.getLogger(__name__)


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


# --- the passes -----------------------------------------------------------------------

def prepare_run_data(cfg: DataConfig, directory: Path, strict: bool = False, corpus_limit: int | None = None,
                     tokenizer: Tokenizer | None = None) -> RunData:
    """Read and split the corpus, train the tokenizer, encode the training pairs, and write
    it all into ``directory`` (the files of the module's docstring). With ``tokenizer``, the
    directory's own (a run an older nmt prepared without data.json), its held-out files are
    checked, not written, and only the encoded pairs and data.json are added."""
    laps = _Laps()
    with kept_pairs(cfg, directory, strict, corpus_limit) as (kept, report):
        laps.done(f"read, normalised and filtered {report.kept:,} pairs")
        valid, test, held_out, overlap = held_out_sets(cfg, kept)
        check_overlap(overlap, cfg.allow_overlap)
        train, sample = carve(kept, held_out, valid, test, cfg.spm_sample // 2)
        laps.done("held out the validation and test sets, sampled for SentencePiece")
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
            laps.done("trained SentencePiece")
        else:  # a run prepared by an nmt before data.json: its split must come out the same
            _check_same_split(directory, valid, test, report.path)
        del sample
        dropped, source_pieces, target_pieces = encode(kept, held_out, tokenizer, directory, cfg.max_pieces)
        laps.done(f"encoded {train:,} training pairs")
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
    laps.done("fingerprinted the source files")
    return open_run_data(directory, tokenizer)


class _Laps:
    """Logs how long each pass took (``nmt -v prepare``; benchmarks/data_scale.py reads them)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def done(self, what: str) -> None:
        now = time.monotonic()
        log.debug("%s in %.1f s", what, now - self.last)
        self.last = now


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
