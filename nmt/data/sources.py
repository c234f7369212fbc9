"""Where a corpus's text comes from: the configured files (plain or gzipped, a TSV corpus or two
aligned files), the default fra-eng corpus fetched when it is absent, and given held-out sets."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nmt.config import Corpus, DataConfig
from nmt.data.corpus import ReadReport, aligned_pairs, check_report, parallel_pairs, tsv_pairs
from nmt.errors import NmtError, SettingError
from nmt.runtime.fileio import atomic_path

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path("data/fra-eng/fra.txt")
FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"

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


def check_regular_files(cfg: DataConfig) -> None:
    """Refuse, before any work, a data file that is a pipe, a FIFO or a device: the corpus is
    read more than once (SentencePiece's sample, the pairs, the fingerprint), and a second read
    of a pipe waits for ever or finds it empty."""
    for what, name in cfg.files().items():
        path = Path(name)
        if path.exists() and not path.is_file() and not path.is_dir():
            flag = "--" + what.split()[0].replace("_", "-")
            raise NmtError(f"{flag} {name}: a pipe or device, not a regular file; nmt reads its data more than "
                           "once, so save it to a file first (e.g. cat … > corpus.tsv) and give that")


def corpus_readers(cfg: DataConfig) -> list[tuple[Iterator[tuple[str, str]], ReadReport]]:
    """Each configured corpus's usable pairs, streamed, and the report they fill as they are
    read: the corpora in order, or the two aligned files; the default corpus is fetched when
    it is absent."""
    if cfg.src_file is not None:
        report = ReadReport(f"{cfg.src_file} + {cfg.tgt_file}")
        readers = [(aligned_pairs(Path(cfg.src_file), Path(cfg.tgt_file), report), report)]
    else:
        if cfg.corpus is None and not DEFAULT_CORPUS.exists():
            download_fra_eng(DEFAULT_CORPUS)
        paths = [Path(corpus.path) for corpus in cfg.corpora()] or [DEFAULT_CORPUS]
        readers = [(tsv_pairs(path, report), report) for path, report in ((p, ReadReport(str(p))) for p in paths)]
    if cfg.reverse:
        readers = [(_swapped(pairs), report) for pairs, report in readers]
    tags = cfg.tags()
    return [(_tagged(pairs, tags[k]) if k in tags else pairs, report) for k, (pairs, report) in enumerate(readers)]


def _swapped(pairs: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """``--reverse``: each pair the other way round."""
    return ((tgt, src) for src, tgt in pairs)


def _tagged(pairs: Iterator[tuple[str, str]], tag: str) -> Iterator[tuple[str, str]]:
    """A tagged corpus's pairs: the tag and a space before each source."""
    return ((f"{tag} {src}", tgt) for src, tgt in pairs)


def read_corpus(cfg: DataConfig, strict: bool = False) -> tuple[list[tuple[str, str]], ReadReport]:
    """Every usable pair of the configured corpora, in memory (for small corpora and tools), and
    what reading them skipped."""
    pairs, total = [], ReadReport(" + ".join(report.path for _, report in corpus_readers(cfg)))
    for read, report in corpus_readers(cfg):
        pairs += read
        check_report(report, strict, report.kept > 0)
        total.kept += report.kept
        total.skipped.update(report.skipped)
    return pairs, total


def corpus_weights(cfg: DataConfig) -> list[tuple[str, float]]:
    """Each corpus (as :func:`corpus_readers` reads them) by name, with its weight."""
    if cfg.src_file is not None:
        return [(f"{cfg.src_file} + {cfg.tgt_file}", 1.0)]
    return [(c.path, c.weight) for c in cfg.corpora()] or [(str(DEFAULT_CORPUS), 1.0)]


def absolute_sources(cfg: DataConfig) -> dict[str, Any]:
    """The settings that name data files, with every path made absolute (the default corpus
    named), so a resumed run finds them from any directory."""
    absolute = {name: str(Path(getattr(cfg, name)).resolve()) for name in DataConfig.FILES[1:]
                if getattr(cfg, name) is not None}
    if cfg.src_file is None:
        corpora = cfg.corpora() or [Corpus(str(DEFAULT_CORPUS))]
        entries = [{"path": str(Path(c.path).resolve()), "weight": c.weight, **({"tag": c.tag} if c.tag else {})}
                   for c in corpora]
        absolute["corpus"] = (entries[0]["path"] if isinstance(cfg.corpus, (str, type(None)))
                              else [e if e["weight"] != 1 or "tag" in e else e["path"] for e in entries])
    return absolute


def source_paths(cfg: DataConfig) -> dict[str, str]:
    """Every data file, absolute, by what it is (:meth:`DataConfig.files`, the default corpus
    named): what prepared data fingerprints."""
    return dataclasses.replace(cfg, **absolute_sources(cfg)).files()


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
