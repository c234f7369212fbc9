"""What the after-training tools give on fra-eng, with confidence intervals and p-values:
checkpoint averaging, an ensemble of a GRU and a Transformer, and fine-tuning on questions
(docs/after-training.md). Trains four runs with step budgets (so that the same seed, data and
CPU give the same runs), then asks ``nmt compare`` each question, greedy and with beam 5.

    python benchmarks/after_training.py --corpus ../shared/data/fra-eng/fra.txt --work /tmp/after

Runs (each skipped when its run.json exists):
- ``transformer``: nmt's Transformer defaults, 4,060 steps (what 20 minutes trained on a 2-core
  Xeon with AMX), validated every 200 steps, its last 5 validations' weights kept and averaged;
- ``gru``: nmt's GRU defaults, 6,477 steps (20 minutes there), on the same split and pieces;
- ``parent``: the Transformer on every pair whose English does not end with "?" (6,060 steps);
- ``child``: ``--init-from parent`` on the questions, less 1,000 distinct question sources held
  out to test it (912 steps at label smoothing 0.1, what 3 minutes trained there).
Run it alone on the machine; the figures are BLEU, not speed, so load changes only the time.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS_TEST = 1000


def nmt(*args: object) -> str:
    """``nmt ARGS`` in its own process; its stdout (stderr passed through)."""
    done = subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE)
    if done.returncode:
        sys.exit(f"nmt {' '.join(map(str, args))} failed")
    return done.stdout


def train(run: Path, threads: str, *flags: object) -> None:
    if not (run / "run.json").exists():
        nmt("train", "--run-dir", run, "--threads", threads, *flags)


def split_questions(corpus: Path, work: Path) -> tuple[Path, Path, Path, Path]:
    """The parent's corpus (no questions), the child's (questions less the held-out sources)
    and the held-out questions' sources and first references."""
    files = [work / name for name in ("rest.tsv", "questions-train.tsv", "questions-test.en", "questions-test.fr")]
    if all(f.exists() for f in files):
        return tuple(files)  # type: ignore[return-value]
    pairs = [line.split("\t")[:2] for line in corpus.read_text(encoding="utf-8").splitlines() if "\t" in line]
    questions = [p for p in pairs if p[0].rstrip().endswith("?")]
    sources = sorted({s for s, _ in questions})
    random.Random(5).shuffle(sources)
    held = set(sources[:QUESTIONS_TEST])
    first: dict[str, str] = {}
    for s, t in questions:
        if s in held:
            first.setdefault(s, t)
    files[0].write_text("".join(f"{s}\t{t}\n" for s, t in pairs if not s.rstrip().endswith("?")), encoding="utf-8")
    files[1].write_text("".join(f"{s}\t{t}\n" for s, t in questions if s not in held), encoding="utf-8")
    files[2].write_text("".join(s + "\n" for s in first), encoding="utf-8")
    files[3].write_text("".join(t + "\n" for t in first.values()), encoding="utf-8")
    return tuple(files)  # type: ignore[return-value]


def held_out_files(run: Path, work: Path) -> tuple[Path, Path]:
    """The run's own test split as a source and a reference file, as nmt eval scores it (each
    distinct source once, against its first translation): the child's test split is another."""
    sys.path.insert(0, str(ROOT))
    from nmt.inference.evaluate import run_test_set
    test = run_test_set(run)
    src, ref = work / f"{run.name}-test.src", work / f"{run.name}-test.ref"
    src.write_text("".join(s + "\n" for s in test.sources), encoding="utf-8")
    ref.write_text("".join(r + "\n" for r in test.refs[0]), encoding="utf-8")
    return src, ref


def compare(title: str, *args: object) -> list[dict]:
    """``nmt compare ARGS`` greedy and with beam 5; a row per system and search."""
    rows = []
    for beam in (1, 5):
        out = json.loads(nmt("compare", *args, "--beam", beam, "--metrics", "bleu,chrf", "--json"))
        for k, system in enumerate(out["systems"]):
            bleu, chrf = (out["scores"][m]["systems"][k] for m in ("bleu", "chrf"))
            rows.append({"question": title, "system": system["name"], "beam": beam, "bleu": bleu, "chrf": chrf,
                         "sentences": out["sentences"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/after-training"))
    parser.add_argument("--threads", default="0", help="nmt train --threads")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    w, threads = args.work, args.threads
    w.mkdir(parents=True, exist_ok=True)
    t, g, parent, child = w / "transformer", w / "gru", w / "parent", w / "child"
    train(t, threads, "--corpus", args.corpus, "--arch", "transformer", "--keep-checkpoints", "5", "--valid-every", "200",
          "--max-steps", "4060")
    train(g, threads, "--corpus", args.corpus, "--max-steps", "6477")
    if (t / "spm.model").read_bytes() != (g / "spm.model").read_bytes():  # an ensemble decodes with one
        sys.exit(f"{t} and {g} trained different SentencePiece models; they cannot form an ensemble")
    rest, questions, q_src, q_ref = split_questions(args.corpus, w)
    train(parent, threads, "--corpus", rest, "--arch", "transformer", "--max-steps", "6060")
    train(child, threads, "--init-from", parent, "--corpus", questions, "--max-steps", "912", "--label-smoothing", "0.1")
    rows = compare("averaging", f"{t}@best", f"{t}@last", f"{t}@averaged")
    rows += compare("ensemble", t, g, f"{t}+{g}", "--precision", "fp32")
    rows += compare("fine-tuning, held-out questions", parent, child, "--src", q_src, "--ref", q_ref)
    rest_src, rest_ref = held_out_files(parent, w)
    rows += compare("fine-tuning, the rest", parent, child, "--src", rest_src, "--ref", rest_ref)
    print_comparison(rows)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))


def print_comparison(rows: list[dict]) -> None:
    """``compare``'s rows as a table: BLEU and chrF2 with their 95% intervals, Δ and p."""
    print(f"\n{'question':<34} {'system':<40} {'beam':>4} {'BLEU ± 95% CI':>16} {'Δ':>7} {'p':>7} "
          f"{'chrF2 ± CI':>15} {'Δ':>7} {'p':>7}")
    for r in rows:
        b, c = r["bleu"], r["chrf"]
        name = "+".join(Path(part).name for part in r["system"].split("+"))  # an ensemble's members
        print(f"{r['question']:<34} {name:<40} {r['beam']:>4} "
              f"{b['score']:>8.2f} ± {b['ci']:<5.2f} {_num(b['delta']):>7} {_num(b['p'], 4):>7} "
              f"{c['score']:>7.2f} ± {c['ci']:<5.2f} {_num(c['delta']):>7} {_num(c['p'], 4):>7}")


def _num(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:+.{digits}f}" if digits == 2 else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
