"""Where a corpus's text comes from: the configured files (plain or gzipped, a TSV corpus or two
aligned files), the default fra-eng corpus fetched when it is absent, and given held-out sets."""
from __future__ import annotations

import hashlib
import io
import logging
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

from nmt.config import DataConfig
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
