"""Formatting results for people and for scripts: n-best lines, JSON lines, score tables."""
from __future__ import annotations

import json

from rich.table import Table

from nmt.inference.metrics import Score
from nmt.inference.search import Hypothesis
from nmt.inference.translate import Translator


def translation_lines(translator: Translator, lines: list[str], nbest: int | None, json_out: bool,
                      batch_size: int) -> list[str]:
    """What ``nmt translate`` prints for ``lines``: translations, n-best lines or JSON lines."""
    if nbest is None and not json_out:
        return translator.translate(lines, batch_size)
    results = translator.nbest(lines, batch_size, with_attention=False)  # as many as its options ask; no attention
    texts = [translator.detokenize(hyps) for hyps in results]
    return (format_json(lines, results, texts, nbest is not None) if json_out
            else format_nbest(results, texts))


def format_nbest(results: list[list[Hypothesis]], texts: list[list[str]]) -> list[str]:
    """``index<TAB>score<TAB>translation`` lines, best first; an empty input gives one empty entry."""
    lines = []
    for index, (hyps, strings) in enumerate(zip(results, texts)):
        if not hyps:
            lines.append(f"{index}\t0.0000\t")
        lines.extend(f"{index}\t{h.score:.4f}\t{t}" for h, t in zip(hyps, strings))
    return lines


def format_json(sources: list[str], results: list[list[Hypothesis]], texts: list[list[str]],
                with_nbest: bool) -> list[str]:
    """One JSON object per input line: source, best translation and score (and the n-best list)."""
    lines = []
    for index, (src, hyps, strings) in enumerate(zip(sources, results, texts)):
        record = {"index": index, "source": src, "translation": strings[0] if strings else "",
                  "score": round(hyps[0].score, 4) if hyps else 0.0}
        if with_nbest:
            record["nbest"] = [{"translation": t, "score": round(h.score, 4)}
                               for h, t in zip(hyps, strings)]
        lines.append(json.dumps(record, ensure_ascii=False))
    return lines


def score_json(info: dict, scores: list[Score]) -> str:
    return json.dumps({**info, "scores": {s.name: {"score": round(s.score, 2), **_interval(s), "signature": s.signature,
                                                   "text": s.text} for s in scores}}, indent=2)


def _interval(score: Score) -> dict:
    """The 95% confidence interval, where the score has one, as sacreBLEU gives it: the
    resamples' mean ± ci, half the width between their 2.5th and 97.5th percentiles (so the
    ends are mean ∓ ci, not the percentiles themselves where the resamples are skewed)."""
    if score.ci is None:
        return {}
    return {"mean": round(score.mean, 2), "ci": round(score.ci, 2), "ci_low": round(score.mean - score.ci, 2),
            "ci_high": round(score.mean + score.ci, 2)}


def score_table(info: dict, scores: list[Score]) -> Table:
    decoding = "greedy" if info["beam"] == 1 else f"beam {info['beam']}, alpha {info['length_penalty']}"
    if info.get("precision", "fp32") != "fp32":
        decoding += f", {info['precision']} weights"
    table = Table(title=f"{info['test_set']}: {info['sentences']} sentences, {info['references']} "
                        f"reference stream(s), {decoding}")
    table.add_column("metric")
    table.add_column("score", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("sacrebleu signature / details")
    for s in scores:
        interval = "" if s.ci is None else f"{s.mean:.2f} ± {s.ci:.2f}"
        table.add_row(s.name.upper(), f"{s.score:.2f}", interval, f"{s.signature}\n{s.text}")
    return table


def bench_table(record: dict) -> Table:
    """One row per phase: throughput and peak memory."""
    s = record["settings"]
    kernels = f", {s['kernels']} kernels" if s.get("kernels", "fast") != "fast" else ""
    table = Table(title=f"nmt bench {s['date']}: {s['device']}, torch {s['torch']}{kernels}")
    for column in ("phase", "sentences/s", "pieces/s", "padding", "peak RSS MB", "seconds"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    t = record["train"]
    trained_at = f"{s['precision']}, " if "precision" in s else ""
    table.add_row(f"train ({trained_at}{t['parameters']:,} params, {t['output_pieces']:,} outputs, {t['steps']} steps)",
                  f"{t['sentences_per_s']:,}",
                  f"{t['pieces_per_s']:,} (target {t['target_pieces_per_s']:,})",
                  f"{t['padding_fraction']:.1%}", f"{t['peak_rss_mb']:,}", f"{t['seconds']}")
    model = f"{s['model']}\n" if "model" in s else ""
    table.caption = (f"{model}training matmuls: {t['gflop_per_step']:,.3g} GFLOP a step (forward and backward) "
                     f"at {t['gflops']:,} GFLOPS, {t['peak_fraction']:.0%} of the device's "
                     f"{t['matmul_peak_gflops']:,} GFLOPS {t['matmul_peak_dtype']} peak")
    precision = s.get("translate_precision", "fp32")
    for name, p in record["translate"].items():
        if name != "greedy" and "length_penalty" in s:
            name += f" alpha {s['length_penalty']}"
        table.add_row(f"translate {name}, {precision} ({p['sentences']} sentences)", f"{p['sentences_per_s']:,}",
                      f"{p['output_pieces_per_s']:,} (output)", "", f"{p['peak_rss_mb']:,}", f"{p['seconds']}")
    return table
