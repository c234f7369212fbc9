"""Scoring a model on a test set: the run's own held-out split or any source/reference files."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nmt.config import read_run_config
from nmt.data.corpus import read_text_lines
from nmt.data.prepare import read_pairs
from nmt.errors import NmtError, SettingError
from nmt.inference.metrics import BOOTSTRAP, Score, corpus_score
from nmt.inference.search import DEFAULT_BATCH
from nmt.inference.translate import Translator


@dataclass
class TestSet:
    """Raw sources and one or more reference streams (None: no such reference for that line)."""

    name: str
    sources: list[str]
    refs: list[list[str | None]]


def run_test_set(run_dir: Path, all_refs: bool = False) -> TestSet:
    """The run's test set: given test files line by line, or its held-out split.

    A held-out split has one segment per distinct source: Tatoeba gives some sources several
    translations. By default each source is scored once against its first translation
    (single-reference BLEU); ``all_refs`` scores it against all of them (multi-reference:
    stream j holds each source's j-th translation, None if it has fewer).
    """
    path = run_dir / "test.tsv"
    pairs = read_pairs(path)
    given = read_run_config(run_dir / "config.yaml").data.test_src
    if given:
        return TestSet(f"{given} (as saved in {path})", [s for s, _ in pairs], [[t for _, t in pairs]])
    if not pairs:
        raise SettingError(None, None, f"{path}: the run holds out no test pairs (trained with "
                           "{test_size} 0); score files with {src} and {ref}", ("test_size", "src", "ref"))
    grouped: dict[str, list[str]] = {}
    for src, tgt in pairs:
        grouped.setdefault(src, []).append(tgt)
    width = max(map(len, grouped.values())) if all_refs else 1
    streams: list[list[str | None]] = [
        [refs[j] if j < len(refs) else None for refs in grouped.values()] for j in range(width)]
    return TestSet(str(path), list(grouped), streams)


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, without their ends."""
    lines = read_text_lines(path)
    try:
        return [line.decode("utf-8") for line in lines]
    except UnicodeDecodeError as e:
        raise NmtError(f"{path}: not valid UTF-8 ({e.reason})") from None


def file_test_set(src: Path, refs: list[Path]) -> TestSet:
    """Sources and references from aligned files; an empty reference line means 'no reference'."""
    sources = read_lines(src)
    if not sources:
        raise NmtError(f"{src}: empty; nothing to score")
    streams: list[list[str | None]] = []
    for ref in refs:
        lines = read_lines(ref)
        if len(lines) != len(sources):
            raise NmtError(f"{ref} has {len(lines)} lines but {src} has {len(sources)}; "
                           f"references must align with the source line by line")
        streams.append([line if line.strip() else None for line in lines])
    for i in range(len(sources)):
        if all(stream[i] is None for stream in streams):
            raise NmtError(f"line {i + 1}: no reference file has a translation for it")
    return TestSet(str(src), sources, streams)


def evaluate(translator: Translator, test: TestSet, metrics: list[str],
             batch_size: int = DEFAULT_BATCH, bootstrap: int = BOOTSTRAP) -> tuple[list[str], list[Score]]:
    """Translate the sources and score the detokenised output against the raw references,
    each score with its 95% confidence interval from ``bootstrap`` resamples (0: none)."""
    hyps = translator.translate(test.sources, batch_size)
    return hyps, [corpus_score(m, hyps, test.refs, bootstrap) for m in metrics]
