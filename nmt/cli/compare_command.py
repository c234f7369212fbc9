"""``nmt compare``: is B really better than A? Every system decoded once on one test set,
scored with confidence intervals, and tested against the first with sacreBLEU's paired tests;
the sentences where they differ most, in the terminal and as a page."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from nmt.cli.options import (BatchOpt, BeamOpt, DeviceOpt, KernelsOpt, Opt, PenaltyOpt, PrecisionOpt, WeightsOpt,
                             at_least, err, load_translator, search_options, user_errors)
from nmt.cli.streams import checked_output, is_stdout, print_out, refuse_same_file, run_inputs
from nmt.errors import NmtError
from nmt.inference.search import DEFAULT_BATCH
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY

if TYPE_CHECKING:
    from nmt.comparison.compare import Comparison
    from nmt.comparison.differences import Example
    from nmt.comparison.systems import System
    from nmt.inference.translate import SentenceTranslator

PAGE_EXAMPLES = 25  # on the --html page when --examples does not say


def register(app: typer.Typer) -> None:
    """Add ``compare`` to ``app``."""
    app.command(epilog="Example: nmt compare checkpoints/base checkpoints/base@averaged checkpoints/a+checkpoints/b "
                       "--beam 5 --metrics bleu,chrf --examples 10 --html compare.html")(compare)


def compare(
    systems: Annotated[list[str], typer.Argument(
        metavar="SYSTEM", help="Two or more, the first the baseline: RUN, RUN@WEIGHTS (best, averaged, step-K …), "
        "RUN+RUN (an ensemble), an EXPORT directory (decoded by CTranslate2), or a FILE of hypotheses, one line "
        "per test source.", show_default=False)],
    src: Annotated[Optional[Path], Opt(help="Source file. \\[default: the runs' own test split]")] = None,
    ref: Annotated[Optional[list[Path]], Opt(help="Reference file, aligned with --src; repeat for more.")] = None,
    all_refs: Annotated[bool, Opt("--all-refs", help="Score each test source of the runs against all its "
                                  "translations, not only the first.")] = False,
    metrics: Annotated[str, Opt(help="Comma-separated: bleu, chrf, ter.")] = "bleu,chrf",
    test: Annotated[str, Opt("--test", help="bs: paired bootstrap resampling; ar: approximate randomisation.")] = "bs",
    n: Annotated[Optional[int], Opt("--n", help="Resamples (bs) or shuffles (ar). \\[default: 1000 for bs, "
                                    "10000 for ar]", show_default=False)] = None,
    seed: Annotated[int, Opt(help="Seed of the resampling (at least 1).")] = 12345,
    examples: Annotated[Optional[int], Opt(help="Also list the K sentences where the systems' sentence chrF "
                                           "differs most. \\[default: none; with --html, 25]",
                                           show_default=False)] = None,
    html: Annotated[Optional[Path], Opt("--html", help="Write the scores and the examples as a web page.")] = None,
    json_out: Annotated[bool, Opt("--json", help="Print one JSON object instead of tables.")] = False,
    beam: BeamOpt = 1,
    length_penalty: PenaltyOpt = DEFAULT_LENGTH_PENALTY,
    weights: WeightsOpt = "default",
    batch_size: BatchOpt = DEFAULT_BATCH,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    kernels: KernelsOpt = "fast",
) -> None:
    """Compare systems: confidence intervals and significance tests.

    Each system is decoded once: its hypotheses are kept in its run (RUN/hypotheses/, keyed by test set, weights
    and search settings) and reused. For each metric: every score with its 95% confidence interval, and every
    other system's difference to the first with its p-value, said in words where p < 0.05."""
    from nmt.comparison.compare import compare as run_comparison
    from nmt.comparison.differences import differing_most
    from nmt.comparison.page import render
    from nmt.comparison.systems import common_test_set, parse_system
    from nmt.inference.evaluate import file_test_set
    from nmt.runtime.fileio import atomic_write_text

    with user_errors():
        chosen = _checked_flags(systems, metrics, test, n, seed, src, ref, all_refs, examples, batch_size)
        options = search_options(beam, None, length_penalty)
        parsed = _named([parse_system(text, weights) for text in systems])
        test_set = file_test_set(src, ref) if src is not None else common_test_set(parsed, all_refs)
        if html is not None and is_stdout(html):
            raise NmtError("--html writes a page to a file; name one (--json prints to stdout)")
        page = checked_output(html, "--html")
        if page is not None:
            refuse_same_file(page, "--html", _inputs(parsed, src, ref))

        def load(paths: list[Path], engine: str, names: str) -> SentenceTranslator:
            return load_translator(paths, device, options, precision, kernels, engine, names)

        result = run_comparison(parsed, test_set, load, chosen, test, n, seed, batch_size)
        on_page = PAGE_EXAMPLES if examples is None else examples
        shown = differing_most(test_set.sources, test_set.refs, result.hyps, on_page if page else examples or 0)
        for system, hit in zip(result.systems, result.cached):
            came = ("read from its file" if system.kind == "file" else
                    f"hypotheses from {system.paths[0] / 'hypotheses'}" if hit else "decoded")
            err.print(f"{system.name}: {came}", highlight=False, soft_wrap=True)
        if page is not None:
            atomic_write_text(page, render(result, shown, _setting(result, beam, length_penalty), on_page))
            err.print(f"wrote [bold]{page}[/]", highlight=False)
        listed = shown[:examples or 0]
        print_out(_json(result, listed, beam, length_penalty) if json_out
                  else _tables(result, listed, beam, length_penalty))


def _checked_flags(systems: list[str], metrics: str, test: str, n: int | None, seed: int, src: Path | None,
                   ref: list[Path] | None, all_refs: bool, examples: int | None, batch_size: int) -> list[str]:
    """The flags checked before any file is read; the metrics asked for."""
    from nmt.comparison.significance import check_metrics, check_test

    chosen = check_metrics([m.strip() for m in metrics.split(",")])
    check_test(test, n, seed)
    if len(systems) < 2:
        raise NmtError(f"nmt compare needs two systems or more, the first the baseline; got {len(systems)}")
    if (src is None) != (not ref):
        raise NmtError("--src and --ref go together")
    if all_refs and src is not None:
        raise NmtError("--all-refs is for the runs' own test split; with --src, pass each --ref")
    if examples is not None:
        at_least("--examples", examples, 0)
    at_least("--batch-size", batch_size)
    return chosen


def _inputs(systems: list[System], src: Path | None, ref: list[Path] | None) -> list[tuple[str, Path | str | None]]:
    """Every file the comparison reads, which --html must not overwrite: the test files, the
    runs' data, and every file of a system's runs and exports (weights, tokenizer, config)."""
    folders = {d for s in systems if s.kind != "file" for d in (*s.paths, *s.test_runs())}
    return [("--src", src), *(("--ref", r) for r in ref or []),
            *((f"system {s.name}", s.paths[0]) for s in systems if s.kind == "file"),
            *(i for s in systems if s.kind in ("run", "ensemble") for run in s.paths for i in run_inputs(run)),
            *((f"{d.name}/{f.relative_to(d)}", f) for d in sorted(folders) if d.is_dir()
              for f in d.rglob("*") if f.is_file())]


def _named(parsed: list[System]) -> list[System]:
    """Systems named apart: a second mention of one gets " (2)"."""
    seen: dict[str, int] = {}
    out = []
    for system in parsed:
        seen[system.name] = seen.get(system.name, 0) + 1
        out.append(replace(system, name=f"{system.name} ({seen[system.name]})") if seen[system.name] > 1 else system)
    return out


def _setting(result: Comparison, beam: int, length_penalty: float) -> str:
    search = "greedy" if beam == 1 else f"beam {beam}, length penalty {length_penalty}"
    test = ("paired bootstrap resampling" if result.test_type == "bs" else "approximate randomisation")
    return (f"{result.test.name}: {len(result.test.sources):,} sentences, {len(result.test.refs)} reference "
            f"stream(s); {search}; {test}, {result.samples:,} samples, seed {result.seed}")


def _tables(result: Comparison, listed: list[Example], beam: int, length_penalty: float) -> Group:
    from nmt.comparison.compare import verdicts
    from nmt.comparison.page import METRIC_NAMES
    parts: list = [Text(_setting(result, beam, length_penalty), style="dim")]
    for metric, rows in result.estimates.items():
        table = Table(title=METRIC_NAMES[metric], title_justify="left", caption=result.signatures[metric],
                      caption_justify="left")
        for column in ("system", "score", "95% CI", "Δ", "p", ""):
            table.add_column(column, justify="left" if column in ("system", "") else "right")
        for system, e in zip(result.systems, rows):
            if e.delta is None:
                table.add_row(system.name, f"{e.score:.2f}", f"{e.mean:.2f} ± {e.ci:.2f}", "", "", "baseline")
                continue
            word = ("identical" if e.identical else "[bold]significant[/]" if e.significant else "not significant")
            table.add_row(system.name, f"{e.score:.2f}", f"{e.mean:.2f} ± {e.ci:.2f}", f"{e.delta:+.2f}",
                          f"{e.p:.4f}", word)
        parts.append(table)
    parts.extend(Text(line) for line in verdicts(result))
    for example in listed:
        parts.append(_example_table(example, [s.name for s in result.systems]))
    return Group(*parts)


def _example_table(example: Example, names: list[str]) -> Table:
    table = Table(title=f"sentence {example.index + 1}: chrF spread {example.spread:.1f}", title_justify="left",
                  show_header=False)
    table.add_column(style="dim")
    table.add_column(overflow="fold")
    table.add_column(justify="right")
    table.add_row("source", Text(example.source), "")
    for ref in example.refs:
        table.add_row("reference", Text(ref), "")
    top = max(example.chrf)
    for name, hyp, chrf in zip(names, example.hyps, example.chrf):
        table.add_row(name, Text(hyp, style="bold" if chrf == top else ""), f"chrF {chrf:.1f}")
    return table


def _json(result: Comparison, listed: list[Example], beam: int, length_penalty: float) -> str:
    from nmt.comparison.compare import verdicts
    names = [s.name for s in result.systems]
    return json.dumps({
        "test_set": result.test.name, "sentences": len(result.test.sources), "references": len(result.test.refs),
        "beam": beam, "length_penalty": length_penalty if beam > 1 else None, "test": result.test_type,
        "samples": result.samples, "seed": result.seed, "baseline": names[0],
        "systems": [{"name": s.name, "kind": s.kind, "cached": hit} for s, hit in zip(result.systems, result.cached)],
        "scores": {metric: {"signature": result.signatures[metric], "systems": [
            {"name": name, "score": round(e.score, 4), "mean": round(e.mean, 4), "ci": round(e.ci, 4),
             "delta": None if e.delta is None else round(e.delta, 4), "p": e.p,
             "significant": e.significant, "identical": e.identical} for name, e in zip(names, rows)]}
            for metric, rows in result.estimates.items()},
        "verdicts": verdicts(result),
        "examples": [{"index": e.index, "source": e.source, "references": list(e.refs), "spread": round(e.spread, 2),
                      "hypotheses": [{"system": name, "text": h, "chrf": c} for name, h, c in zip(names, e.hyps, e.chrf)]}
                     for e in listed],
    }, indent=2, ensure_ascii=False)
