"""nmt's own decoding against CTranslate2 decoding the same weights (issue 41).

The run is exported twice (``nmt export``: float32, and int8); each engine then translates the
run's first 2,000 test sources, text in and text out, through nmt's one input contract
(:class:`nmt.inference.translate.SentenceTranslator`): the same normalisation, pieces, budgets
and length penalty, batches of 128. Each configuration runs in a process of its own, which
loads its model, warms up on 128 sources and times the 2,000 once, and reports sentences/s,
its peak RSS and the BLEU of what it wrote; the configurations take turns, their order
reversed every round. 2 threads each (nmt: two batches on one thread each; CTranslate2: its
``inter_threads`` x ``intra_threads``, see ``--ct2-workers``). The ``ctranslate2-direct`` rows
call CTranslate2 as its own users do, pieces in and out (only its call is timed), with its own
batching and defaults.

Usage::

    python benchmarks/ctranslate2_side_by_side.py run RUN WORK [--rounds 3] [--sentences 2000]
    python benchmarks/ctranslate2_side_by_side.py profile RUN WORK     # where nmt's time goes

``run`` writes WORK/side_by_side.json and prints a table; bf16 rows appear where the CPU has
native bfloat16 for that engine (nmt: avx512_bf16 or AMX; CTranslate2: its own list).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

SEARCHES = {"greedy": 1, "beam 5": 5}


def configurations(work: Path) -> list[tuple[str, str, str]]:
    """(engine, precision, model) of each row: nmt at fp32, int8 and bf16 where native;
    CTranslate2 on the float32 export (float32, and bfloat16 where native) and the int8 one."""
    import ctranslate2

    from nmt.runtime.precision import cpu_bf16_flags

    rows = [("nmt", "fp32", ""), ("nmt", "int8", "")]
    if cpu_bf16_flags():
        rows.append(("nmt", "bf16", ""))
    rows += [("ctranslate2", "fp32", str(work / "ct2-float32")), ("ctranslate2", "int8", str(work / "ct2-int8")),
             ("ctranslate2-direct", "fp32", str(work / "ct2-float32")),
             ("ctranslate2-direct", "int8", str(work / "ct2-int8"))]
    if "bfloat16" in ctranslate2.get_supported_compute_types("cpu"):
        rows.append(("ctranslate2", "bf16", str(work / "ct2-float32")))
    return rows


def export(run: Path, work: Path) -> None:
    from nmt.export.exported import export_run

    for quantization in ("float32", "int8"):
        if not (work / f"ct2-{quantization}").is_dir():
            export_run(run, work / f"ct2-{quantization}", quantization)


def one(run: Path, engine: str, precision: str, model: str, beam: int, sentences: int, ct2_workers: int,
        out: Path) -> None:
    """One turn: load, warm up on 128 sources, time ``sentences`` of them; print a JSON line."""
    from nmt.inference.evaluate import run_test_set
    from nmt.inference.metrics import corpus_score
    from nmt.inference.settings import SearchOptions

    test = run_test_set(run)
    sources, refs = test.sources[:sentences], [stream[:sentences] for stream in test.refs]
    if engine == "nmt":
        from nmt.api import load

        translator = load(run, "cpu", precision).translator(SearchOptions(beam))
    else:
        from nmt.export.engine import CTranslate2Translator
        from nmt.export.exported import open_exported

        translator = CTranslate2Translator(open_exported(Path(model)), "cpu", precision, SearchOptions(beam),
                                           workers=ct2_workers)
        if engine == "ctranslate2-direct":
            translator = _Direct(translator)
    translator.translate(sources[:128])
    start = time.perf_counter()
    hyps = translator.translate(sources)
    seconds = getattr(translator, "seconds", None) or time.perf_counter() - start
    out.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    print(json.dumps({"sentences_per_s": round(len(sources) / seconds, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                      "bleu": round(corpus_score("bleu", hyps, refs).score, 2),
                      "precision": translator.precision}))


class _Direct:
    """CTranslate2 as its own users call it: pieces in, pieces out (tokenising is not timed),
    every sentence in one call that it sorts and batches by 128 itself, its own defaults
    otherwise (its own length penalty, 1, which is not GNMT's; at most 256 pieces out)."""

    def __init__(self, engine: object) -> None:
        self.engine, self.precision = engine, engine.precision
        self.seconds = 0.0  # the last call's, all that is timed

    def translate(self, sources: list[str]) -> list[str]:
        piece = self.engine.tokenizer.sp.id_to_piece
        pieces = [[piece(i) for i in ids] for ids in self.engine.encode(sources)]
        start = time.perf_counter()
        outputs = self.engine.engine.translate_batch(pieces, max_batch_size=128, beam_size=self.engine.options.beam)
        self.seconds = time.perf_counter() - start
        return [self.engine.tokenizer.sp.decode(o.hypotheses[0]) for o in outputs]


def side_by_side(run: Path, work: Path, rounds: int, sentences: int, ct2_workers: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    export(run, work)
    rows = configurations(work)
    results: dict = {"run": str(run), "sentences": sentences, "rounds": rounds, "ct2_workers": ct2_workers}
    for search, beam in SEARCHES.items():
        turns: dict[str, list[dict]] = {f"{e} {p}": [] for e, p, _ in rows}
        for turn in range(rounds):
            for engine, precision, model in (rows if turn % 2 == 0 else rows[::-1]):
                hyps = work / f"hyps-{engine}-{precision}-beam{beam}.txt"
                command = [sys.executable, __file__, "one", str(run), engine, precision, model or "-",
                           str(beam), str(sentences), str(ct2_workers), str(hyps)]
                line = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
                turns[f"{engine} {precision}"].append(json.loads(line))
        results[search] = {name: {"sentences_per_s": [t["sentences_per_s"] for t in ts],
                                  "median": statistics.median(t["sentences_per_s"] for t in ts),
                                  "peak_rss_mb": max(t["peak_rss_mb"] for t in ts), "bleu": ts[0]["bleu"],
                                  "compute": ts[0]["precision"]}
                           for name, ts in turns.items()}
        print(json.dumps({search: results[search]}), flush=True)
    (work / "side_by_side.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)


def print_table(results: dict) -> None:
    """Markdown: one row per configuration, and nmt over CTranslate2 at each precision."""
    print("| engine, precision | greedy sent/s | beam 5 sent/s | peak RSS MB (beam 5) | BLEU greedy | BLEU beam 5 |")
    print("|---|---|---|---|---|---|")
    for name in results["greedy"]:
        g, b = results["greedy"][name], results["beam 5"][name]
        print(f"| {name} ({g['compute']}) | {g['median']} | {b['median']} | {b['peak_rss_mb']} | {g['bleu']} | {b['bleu']} |")
    for precision in ("fp32", "int8", "bf16"):
        for peer in ("ctranslate2", "ctranslate2-direct"):
            ours, theirs = f"nmt {precision}", f"{peer} {precision}"
            if ours in results["greedy"] and theirs in results["greedy"]:
                ratios = [results[s][ours]["median"] / results[s][theirs]["median"] for s in SEARCHES]
                print(f"nmt / {peer} at {precision}: greedy {ratios[0]:.2f}x, beam 5 {ratios[1]:.2f}x")


def profile(run: Path, sentences: int) -> None:
    """nmt fp32's greedy and beam-5 search under torch.profiler: the operators' own time by
    kind, and what is left of the wall time (Python between the operators)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from nmt.api import load
    from nmt.inference.evaluate import run_test_set
    from nmt.inference.settings import SearchOptions

    sources = run_test_set(run).sources[:sentences]
    model = load(run, "cpu", "fp32")
    for search, beam in SEARCHES.items():
        translator = model.translator(SearchOptions(beam))
        translator.workers = 1  # one thread's worth: the profiler follows one interpreter thread
        torch.set_num_threads(1)
        translator.translate(sources[:64])
        start = time.perf_counter()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            translator.translate(sources)
        wall = time.perf_counter() - start
        events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in events) / 1e6
        print(f"{search}: {wall:.2f} s under the profiler, operators {total:.2f} s, the rest "
              f"{wall - total:.2f} s ({(wall - total) / wall:.0%}: Python and the profiler itself)")
        for e in events[:12]:
            print(f"  {e.key:40s} {e.self_cpu_time_total / 1e6:7.2f} s  {e.count:8d} calls")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("run")
    a.add_argument("run", type=Path)
    a.add_argument("work", type=Path)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--sentences", type=int, default=2000)
    a.add_argument("--ct2-workers", type=int, default=0, help="CTranslate2's inter_threads (0: as nmt's)")
    a = sub.add_parser("profile")
    a.add_argument("run", type=Path)
    a.add_argument("--sentences", type=int, default=500)
    a = sub.add_parser("one")
    for name in ("run", "engine", "precision", "model", "beam", "sentences", "ct2_workers", "out"):
        a.add_argument(name)
    args = p.parse_args()
    if args.cmd == "run":
        side_by_side(args.run, args.work, args.rounds, args.sentences, args.ct2_workers)
    elif args.cmd == "profile":
        profile(args.run, args.sentences)
    else:
        one(Path(args.run), args.engine, args.precision, args.model, int(args.beam), int(args.sentences),
            int(args.ct2_workers), Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
