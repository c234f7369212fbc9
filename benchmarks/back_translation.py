"""Does back-translation help on 30,000 pairs? The recipe of docs/back-translation.md on the
English→French slice of benchmarks/small_corpus.py, with fra.txt's other French sentences as
the monolingual text; ``nmt compare`` then tests each forward run against the baseline.

    python benchmarks/back_translation.py --corpus ../shared/data/fra-eng/fra.txt --work /tmp/bt
                                          [--pairs 30000] [--mono 0] [--arch transformer]
                                          [--patience 3] [--max-minutes 30] [--max-steps 0] [--threads 0]

Steps, each skipped when its output exists (so an interrupted run goes on where it stopped):
1. the split of small_corpus.py (en-fr: the same test, validation and training pairs);
2. the monolingual French: every distinct French sentence of the corpus that is neither in the
   training sample nor a translation of a validation or test source (``--mono N``: a random N);
3. the reverse run (French→English) on the training pairs, ``nmt prepare --reverse``;
4. its translations of the monolingual French, with beam 5, by unrestricted sampling (Edunov et
   al. 2018) and by sampling from the 10 likeliest pieces, one line for each line;
5. forward runs on the real pairs alone (the baseline) and with each synthetic corpus, beam
   untagged and tagged (``tag: <bt>``, Caswell et al. 2019), both samplings untagged;
6. ``nmt compare`` of them all on the test set, greedy and beam 5: BLEU and chrF with 95%
   intervals, and each run's p-value against the baseline.
With ``--max-steps N`` every run trains at most N steps, so its BLEU does not depend on the
machine's load; with only ``--max-minutes`` a busy machine trains fewer steps, and scores less.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from after_training import compare, print_comparison  # noqa: E402  (the same comparison)
from small_corpus import nmt, split  # noqa: E402  (the same split and the same runner)

RUNS = {  # forward runs: the synthetic corpus each adds to the real pairs, and its tag
    "baseline": None,
    "bt-beam": ("beam", None),
    "bt-beam-tagged": ("beam", "<bt>"),
    "bt-sample": ("sample", None),
    "bt-top10": ("top10", None),
}
SEARCHES = {"beam": ["--beam", "5"], "sample": ["--sample", "--seed", "1"],
            "top10": ["--sample", "--top-k", "10", "--seed", "1"]}


def monolingual(corpus: Path, work: Path, limit: int) -> Path:
    """fra.txt's French that is in no split: neither trained on nor a held-out translation."""
    mono = work / "mono.fr"
    if mono.exists():
        return mono
    held = {line for name in ("valid.src", "test.src") for line in (work / name).read_text("utf-8").splitlines()}
    pairs = [line.split("\t")[:2] for line in corpus.read_text(encoding="utf-8").splitlines() if "\t" in line]
    used = {fr for en, fr in pairs if en in held}
    used |= {line.split("\t")[1] for line in (work / "train.tsv").read_text("utf-8").splitlines()}
    french = sorted({fr for _, fr in pairs} - used)
    if limit:
        french = random.Random(6).sample(french, min(limit, len(french)))
    mono.write_text("".join(fr + "\n" for fr in french), encoding="utf-8")
    return mono


def prepare(work: Path, name: str, corpus: list, reverse: bool = False) -> Path:
    """Prepared data for a list of corpora (paths or {path, weight, tag}) with the split's
    held-out files, the model's source first."""
    data = work / f"data-{name}"
    if data.exists():
        return data
    config = work / f"{name}.yaml"
    config.write_text(json.dumps({"corpus": corpus}), encoding="utf-8")  # JSON is YAML
    src, tgt = ("tgt", "src") if reverse else ("src", "tgt")
    files = []
    for part in ("valid", "test"):
        files += [f"--{part}-src", str(work / f"{part}.{src}"), f"--{part}-tgt", str(work / f"{part}.{tgt}")]
    nmt("prepare", "--config", str(config), *files, *(["--reverse"] if reverse else []), "-o", str(data))
    return data


def train(data: Path, run: Path, args: argparse.Namespace) -> Path:
    if not (run / "run.json").exists():
        steps = ["--max-steps", str(args.max_steps)] if args.max_steps else []
        # without R-Drop and at width 256 for every run: the runs with synthetic pairs have over
        # 50,000, where those are the defaults, and a baseline otherwise would compare models, not data
        nmt("train", "--data", str(data), "--run-dir", str(run), "--arch", args.arch, "--patience",
            str(args.patience), "--max-minutes", str(args.max_minutes), *steps, "--threads", args.threads,
            "--rdrop-alpha", "0", "--embed-size", "256", "--hidden-size", "256")
        print(f"trained {run.name}", flush=True)
    return run


def synthetic(reverse: Path, mono: Path, work: Path, search: str) -> Path:
    """The reverse run's translations of ``mono`` beside it as pairs, less any with an empty side."""
    pairs = work / f"synthetic-{search}.tsv"
    if pairs.exists():
        return pairs
    english = work / f"synthetic-{search}.en"
    nmt("translate", "--checkpoint", str(reverse), "--input", str(mono), "--output", str(english),
        *SEARCHES[search])
    sources = english.read_text("utf-8").splitlines()
    targets = mono.read_text("utf-8").splitlines()
    assert len(sources) == len(targets), "a line for every line"
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in zip(sources, targets) if s.strip() and t.strip()),
                     encoding="utf-8")
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/back-translation"))
    parser.add_argument("--pairs", type=int, default=30000)
    parser.add_argument("--mono", type=int, default=0, help="monolingual sentences, at most (0: all)")
    parser.add_argument("--arch", default="transformer")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--max-minutes", type=float, default=30)
    parser.add_argument("--max-steps", type=int, default=0, help="steps for each run (0: no limit)")
    parser.add_argument("--threads", default="0", help="nmt train --threads")
    parser.add_argument("--only", default=",".join(RUNS))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    split(args.corpus, args.pairs, work, "en-fr")
    mono = monolingual(args.corpus, work, args.mono)
    real = str(work / "train.tsv")
    reverse = train(prepare(work, "reverse", [real], reverse=True), work / "reverse", args)
    runs = []
    for name in args.only.split(","):
        corpus: list = [real]
        if RUNS[name]:
            search, tag = RUNS[name]
            corpus.append({"path": str(synthetic(reverse, mono, work, search)), **({"tag": tag} if tag else {})})
        runs.append(train(prepare(work, name, corpus), work / name, args))
    rows = compare("back-translation", *runs)
    print(f"\nmonolingual sentences: {len(mono.read_text('utf-8').splitlines()):,}")
    print_comparison(rows)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
