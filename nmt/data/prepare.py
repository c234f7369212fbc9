"""Turning a corpus into prepared data: read, split, train the tokenizer, encode, in passes
whose memory does not grow with the corpus. Done once per run (or once for many, ``nmt
prepare``); a resumed run, and every other rank, opens what was written.

A directory of prepared data holds ``spm.model``, ``valid.tsv`` and ``test.tsv`` (the held-out
pairs as text), the training pairs encoded flat (:mod:`nmt.data.store`: ``train.src`` and
``train.tgt``) and as text (``train.src.text``, ``train.tgt.text``; data an nmt before subword
sampling prepared has none), and ``data.json`` (:class:`nmt.data.manifest.Manifest`).

The passes that read and encode the corpus are :mod:`nmt.data.passes`; where its text comes
from, :mod:`nmt.data.sources`.
"""
from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.config import DataConfig, RunConfig
from nmt.data.corpus import read_tsv
from nmt.data.manifest import MANIFEST, Manifest, content, fingerprint
from nmt.data.passes import Encoded, Kept, carve, check_overlap, encode, held_out_sets, kept_pairs
from nmt.data.sampling import Reservoir
from nmt.data.sources import absolute_sources, check_regular_files, corpus_weights, source_paths
from nmt.data.store import TextStore, TokenStore
from nmt.data.tokenizer import UNK_ID, Tokenizer
from nmt.errors import NmtError, SettingError, SettingMessage, shown
from nmt.runtime.fileio import atomic_path, atomic_write_lines, whole_directory

log = logging.getLogger(__name__)


@dataclass
class RunData:
    """A run's tokenizer, encoded training pairs (memory-mapped) and their text (None in data
    prepared before it was stored), raw held-out pairs, and the manifest that says what they hold."""

    tokenizer: Tokenizer
    train_src: TokenStore
    train_tgt: TokenStore
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]
    manifest: Manifest
    train_text: tuple[TextStore, TextStore] | None = None

    @property
    def source_pieces(self) -> list[int]:
        """Ids the encoder has rows for: the specials and every piece of a training source."""
        return self.manifest.source_pieces

    @property
    def target_pieces(self) -> list[int]:
        """Ids the decoder reads and the generator scores: specials and training-target pieces."""
        return self.manifest.target_pieces

    def rows(self, config: RunConfig) -> tuple[list[int], list[int]]:
        """The pieces each side of ``config``'s model has rows for: those of the training pairs'
        best segmentations, or with subword sampling every piece, since a sampled segmentation
        may hold any (and none may become ``<unk>``)."""
        if config.train.subword_alpha:
            every = list(range(self.tokenizer.vocab_size))
            return every, every
        return self.source_pieces, self.target_pieces

    def sized(self, config: RunConfig) -> RunConfig:
        """``config`` with the vocabulary and each side's piece count of this data."""
        source, target = self.rows(config)
        return config.replace(vocab=self.tokenizer.vocab_size, source_pieces=len(source),
                              target_pieces=len(target), tokenizer_sha256=self.tokenizer.sha256)


# --- the passes -----------------------------------------------------------------------

def prepare_run_data(cfg: DataConfig, directory: Path, strict: bool = False, corpus_limit: int | None = None,
                     tokenizer: Tokenizer | None = None, cut_with: Tokenizer | None = None) -> RunData:
    """Read and split the corpora, train the tokenizer, encode the training pairs, and write
    it all into ``directory`` (the files of the module's docstring). With ``tokenizer``, the
    directory's own (a run an older nmt prepared without data.json), its held-out files are
    checked, not written, and only the encoded pairs and data.json are added. With
    ``cut_with`` (a fine-tuned run's parent's), that tokenizer is copied in instead of trained."""
    if cut_with is not None:
        _check_tags_kept(cut_with, cfg)
    laps = _Laps()
    with kept_pairs(cfg, directory, strict, corpus_limit) as kept:
        name = " + ".join(report.path for report in kept.reports)
        laps.done(f"read, normalised and filtered {sum(r.kept for r in kept.reports):,} pairs")
        if kept.duplicates:
            log.info("dropped %d exact duplicate pairs", kept.duplicates)
        valid, test, held_out, overlap = held_out_sets(cfg, kept.path)
        check_overlap(overlap, cfg.allow_overlap)
        train, sample = carve(kept.path, held_out, valid, test, cfg.spm_sample // 2)
        laps.done("held out the validation and test sets, sampled for SentencePiece")
        _warn_if_carved_short(cfg, valid, test)
        log.info("%s: %d training, %d validation, %d test pairs", name, train.total(), len(valid), len(test))
        if not train:
            raise NmtError(f"{name}: no training pairs left after the held-out split")
        if tokenizer is None:
            _write_held_out(directory, valid, test)
            tokenizer = _copy_tokenizer(cut_with, directory) if cut_with else _train_tokenizer(cfg, sample, directory)
            laps.done("copied the tokenizer" if cut_with else "trained SentencePiece")
        else:  # a run prepared by an nmt before data.json: its split must come out the same
            _check_same_split(directory, valid, test, name)
        del sample
        encoded = encode(kept.path, held_out, tokenizer, directory, cfg.max_pieces, cfg.max_length_ratio)
        laps.done(f"encoded {train.total():,} training pairs")
    _report_dropped(cfg, encoded, name)
    _manifest(cfg, kept, encoded, valid, test, overlap, tokenizer, directory).save(directory)
    laps.done("fingerprinted the source files")
    data = open_run_data(directory, tokenizer)
    if cut_with is None:  # a fine-tuned run's unknown pieces are reported against its parent's
        _warn_if_unknown(cfg, data)
    return data


FILTERED_FLOOR = 0.1  # the share of training pairs the length filters must keep, or prepare refuses


def _report_dropped(cfg: DataConfig, encoded: Encoded, name: str) -> None:
    """Log what the length filters dropped; warn when they drop most pairs, and refuse when they
    keep under :data:`FILTERED_FLOOR` of them (a setting's mistake, not a corpus to train on)."""
    if encoded.dropped_long:
        log.info("dropped %d training pairs longer than %d pieces", encoded.dropped_long, cfg.max_pieces)
    if encoded.dropped_ratio:
        log.info("dropped %d training pairs whose sides' lengths differ more than %g times",
                 encoded.dropped_ratio, cfg.max_length_ratio)
    if not encoded.pairs:
        raise NmtError(f"{name}: no training pairs left after the held-out split and the filters")
    kept = encoded.pairs.total()
    share = kept / (kept + encoded.dropped_long + encoded.dropped_ratio)
    if share < 0.5:
        by = [f"{flag} {value:g} dropped {dropped:,}" for flag, value, dropped in
              (("--max-pieces", cfg.max_pieces, encoded.dropped_long),
               ("--max-length-ratio", cfg.max_length_ratio, encoded.dropped_ratio)) if dropped]
        said = f"{name}: the length filters keep {kept:,} training pairs, {share:.1%} of them ({', '.join(by)})"
        if share < FILTERED_FLOOR:
            raise NmtError(f"{said}; under {FILTERED_FLOOR:.0%} is refused: raise --max-pieces, or --max-length-ratio "
                           "(0: off)")
        log.warning("%s", said)


def _manifest(cfg: DataConfig, kept: Kept, encoded: Encoded, valid: list, test: list,
              overlap: dict[str, tuple[int, int]], tokenizer: Tokenizer, directory: Path) -> Manifest:
    """What was prepared: the corpora's pairs are a range of the stores each, in order."""
    corpora, start = [], 0
    for k, ((path, weight), report) in enumerate(zip(corpus_weights(cfg), kept.reports)):
        corpora.append({"path": path, "weight": weight, **({"tag": cfg.tags()[k]} if k in cfg.tags() else {}),
                        "read": report.kept, "train": encoded.pairs[k], "start": start})
        start += encoded.pairs[k]
    skipped: Counter = sum((report.skipped for report in kept.reports), Counter())
    return Manifest(
        sources={name: fingerprint(Path(path)) for name, path in source_paths(cfg).items()},
        corpus=" + ".join(report.path for report in kept.reports), corpora=corpora,
        pairs={"read": sum(c["read"] for c in corpora), "skipped": dict(skipped), "duplicates": kept.duplicates,
               "train": encoded.pairs.total(), "dropped_long": encoded.dropped_long,
               "dropped_ratio": encoded.dropped_ratio, "valid": len(valid), "test": len(test)},
        held_out_overlap={part: {"sources": total, "in_training_corpus": shared}
                          for part, (shared, total) in overlap.items()},
        tokenizer_sha256=tokenizer.sha256, vocab_size=tokenizer.vocab_size, source_pieces=encoded.source_pieces,
        target_pieces=encoded.target_pieces,
        settings={name: getattr(cfg, name) for name in DataConfig.PREPARED} | absolute_sources(cfg),
        held_out={name: content(directory / name) for name in ("valid.tsv", "test.tsv")})


def _warn_if_carved_short(cfg: DataConfig, valid: list, test: list) -> None:
    for part, pairs in (("valid", valid), ("test", test)):
        if not getattr(cfg, f"{part}_src"):  # carved
            _warn_if_short(cfg, f"{part}_size", len({src for src, _ in pairs}),
                           "a held-out set takes at most a tenth of the corpus's distinct source sentences")


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


def _check_tags_kept(tokenizer: Tokenizer, cfg: DataConfig) -> None:
    """A fine-tuned run keeps its parent's tokenizer, which must hold each corpus tag whole: a
    tag the parent was not trained with would be cut into pieces, unknown ones among them."""
    for tag in sorted(set(cfg.tags().values())):
        if tokenizer.pieces(tokenizer.encode([tag])[0]) not in (["▁", tag], [tag]):
            raise NmtError(f"corpus tag {tag}: the parent's tokenizer has no piece {tag}, so the tag would be "
                           "cut into pieces; fine-tune from a parent trained with that tag, or drop the tag")


def _copy_tokenizer(tokenizer: Tokenizer, directory: Path) -> Tokenizer:
    with atomic_path(directory / "spm.model") as tmp:
        shutil.copyfile(tokenizer.model_path, tmp)
    return Tokenizer(directory / "spm.model")


def _train_tokenizer(cfg: DataConfig, sample: Reservoir, directory: Path) -> Tokenizer:
    """SentencePiece on the sampled training pairs' sources, then targets."""
    if sample.offered > len(sample.items):
        log.info("SentencePiece trains on %d of the %d training pairs, drawn at random", len(sample.items),
                 sample.offered)
    texts = [s for s, _ in sample.items] + [t for _, t in sample.items]
    tokenizer = Tokenizer.train(texts, directory / "spm.model", cfg.vocab_size, tuple(sorted(set(cfg.tags().values()))))
    if sample.offered > len(sample.items):
        _warn_if_short(cfg, "vocab_size", tokenizer.vocab_size, "SentencePiece trained on a sample (--spm-sample "
                       f"{cfg.spm_sample:,}); raise it", f"{len(sample.items):,} of the {sample.offered:,} pairs give")
    else:
        _warn_if_short(cfg, "vocab_size", tokenizer.vocab_size, "a unigram vocabulary ends where its text has no "
                       "more pieces worth keeping")
    return tokenizer


UNKNOWN_SHARE = 0.01  # of the training pieces <unk>, above which prepare warns


def _warn_if_unknown(cfg: DataConfig, data: RunData) -> None:
    """Warn when many training pieces are <unk>: text SentencePiece's sample never showed it."""
    stores = (data.train_src, data.train_tgt)
    pieces = sum(store.ids.size for store in stores)
    share = sum(int(np.count_nonzero(store.ids == UNK_ID)) for store in stores) / max(1, pieces)
    if share <= UNKNOWN_SHARE:
        return
    sampled = cfg.spm_sample < data.manifest.pairs["train"]
    log.warning(SettingMessage("spm_sample", cfg.spm_sample, f"{share:.0%} of the training pieces are <unk>: "
                               "SentencePiece trained on too few pairs to see this corpus's characters; raise it"
                               if sampled else f"{share:.0%} of the training pieces are <unk>: characters too "
                               "rare for SentencePiece's vocabulary; check the corpus's text"))


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
    text = None
    if (directory / "train.src.text.ids.npy").exists():
        text = TextStore.open(directory, "train.src.text"), TextStore.open(directory, "train.tgt.text")
        if len(text[0]) != len(train_src) or len(text[1]) != len(train_src):
            raise NmtError(f"{directory}: the training text does not match the encoded pairs; prepare the data again")
    valid, test = read_pairs(directory / "valid.tsv"), read_pairs(directory / "test.tsv")
    manifest.check_held_out(directory, "valid.tsv", len(valid))
    manifest.check_held_out(directory, "test.tsv", len(test))
    return RunData(tokenizer, train_src, train_tgt, valid, test, manifest, text)


def check_run_data(cfg: DataConfig, run_dir: Path) -> None:
    """Refuse a run's data when what it came from changed since it was prepared: the files, for
    data prepared in the run; the data's data.json, for prepared data it was given (``data``)."""
    if cfg.data is None:
        Manifest.load(run_dir).check_sources(source_paths(cfg), "this run started with")
    elif not (Path(cfg.data) / MANIFEST).is_file():
        raise SettingError("data", cfg.data, f"{run_dir} trains on the data prepared there, which is gone (moved "
                           f"or deleted); if it moved: nmt train --resume {run_dir} --data NEWDIR")
    elif manifest_sha256(Path(cfg.data)) != cfg.data_sha256:
        raise SettingError("data", cfg.data, "not the data this run started with (its data.json changed); "
                           "resume with the data it started with")


def data_dir(cfg: DataConfig, run_dir: Path) -> Path:
    """Where a run's prepared data is: given to it (``data``), or in the run itself."""
    return Path(cfg.data) if cfg.data is not None else run_dir


def manifest_sha256(directory: Path) -> str:
    return content(directory / MANIFEST)["sha256"]


def adopt_prepared(cfg: DataConfig) -> DataConfig:
    """``cfg`` for training on the prepared data ``cfg.data``: its files and settings as its
    data.json records them, and that file's SHA-256. A setting given that differs from the
    data's is refused: the data would have to be prepared again."""
    directory = Path(cfg.data).resolve()
    prepared = Manifest.load(directory).settings
    given = dataclasses.replace(cfg, **absolute_sources(cfg)) if cfg.files() else cfg  # paths compared absolute
    for name in DataConfig.PREPARED:
        value, recorded = getattr(given, name), prepared.get(name, getattr(DataConfig, name))
        if getattr(cfg, name) != getattr(DataConfig, name) and value != recorded:
            raise SettingError(name, shown(getattr(cfg, name)), f"{{data}} {directory} was prepared with "
                               f"{shown(recorded)}; prepare it again (nmt prepare) to change it", ("data",))
    return dataclasses.replace(cfg, **{name: prepared.get(name, getattr(DataConfig, name))
                                       for name in DataConfig.PREPARED},
                               data=str(directory), data_sha256=manifest_sha256(directory))


def prepare_data_dir(cfg: DataConfig, out: Path, strict: bool = False) -> RunData:
    """``nmt prepare``: ``cfg``'s data, prepared into the new directory ``out``, whole or not at
    all (it is built beside ``out`` and renamed into place)."""
    check_regular_files(cfg)
    with whole_directory(out) as partial:
        prepare_run_data(cfg, partial, strict)
    return open_run_data(out)


def _warn_if_short(cfg: DataConfig, name: str, got: int, why: str, source: str = "this corpus gives") -> None:
    """Warn that the data gives less of ``name`` than the user asked for (a default that the
    data cannot give is no one's request: a small corpus simply gets less)."""
    asked = getattr(cfg, name)
    if asked != getattr(DataConfig, name) and got < 0.95 * asked:
        log.warning(SettingMessage(name, asked, f"{why}: {source} {got:,}"))


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """Read a held-out split file written by :func:`prepare_run_data`."""
    if not path.is_file():
        raise NmtError(f"{path}: missing from the run directory")
    if path.stat().st_size == 0:  # a run held nothing out
        return []
    pairs, _ = read_tsv(path, strict=True)
    return pairs
