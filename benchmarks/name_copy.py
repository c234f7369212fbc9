"""Do names the corpus never saw come through unchanged? And does training on pairs whose one
name is swapped for made-up names teach the model to copy them?

    python benchmarks/name_copy.py --run RUN --corpus ../shared/data/fra-eng/fra.txt --work /tmp/names
                                   [--steps 600] [--rate 0.5] [--threads 0] [--others RUN ...]

RUN is a trained English→French run on fra-eng (e.g. ``nmt train``'s default GRU); ``--others``
measures the copying of other runs too. Tatoeba's English has one name far above all others,
"Tom" (in about a tenth of the pairs, copied as "Tom" in French), and few others; so the
model may learn to copy "Tom", not to copy names.

1. Copying: 87 common first names that fra.txt never holds, each in three sentences ("Tom
   chases NAME.", "NAME is here.", "I saw NAME yesterday."), translated greedy and with beam 5;
   a name is copied when the translation holds it exactly.
2. The remedy, as two fine-tuning runs from RUN (``nmt train --init-from RUN``) with the same
   steps, learning rate and data order on RUN's training pairs: ``control`` on them as they
   are, ``swapped`` on them with "Tom" replaced, on both sides, by a made-up name in ``--rate``
   of the pairs where both sides hold it equally often. The made-up names are syllables drawn
   at random (seed 7), none a word of the corpus or a test name, each cut into pieces the
   model has rows for on both sides; so the test names are never trained on.
3. Copying again for both, of the test names and of 87 made-up names of the same kind that
   training never saw (seed 99), and ``nmt compare RUN control swapped`` on RUN's own test
   split: the swap must not cost translation quality elsewhere.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from after_training import compare, held_out_files, nmt, print_comparison, train

NAMES = """Jerry Harold Wendy Brandon Megan Kevin Dylan Chloe Ethan Olivia Logan Zoe Austin Brianna
Tyler Kayla Hailey Dustin Amber Travis Brittany Cody Chelsea Garrett Jared Kelsey Trevor Lindsey
Darren Shelby Wesley Tiffany Spencer Courtney Colin Brooke Derek Jenna Shane Kendra Bradley Monica
Russell Vanessa Marcus Gloria Clifford Norma Vernon Doris Floyd Mildred Edna Wallace Bernice Lloyd
Gladys Gordon Ruby Howard Hazel Leonard Irene Ralph Lorraine Stanley Wanda Randy Tammy Kirk Trudy
Gustav Ingrid Ronan Fiona Quentin Priya Rahul Sanjay Anika Keiko Hiroshi Yuki Dmitri Olga Sven
Astrid""".split()
TEMPLATES = ("Tom chases {}.", "{} is here.", "I saw {} yesterday.")
SWAPPED = "Tom"
ONSETS = "b c d f g h j k l m n p r s t v w z br cl dr fl gr kr pl st tr sh ch th".split()
VOWELS = "a e i o u ai ea ee oo ou ie y".split()
CODAS = ["", "", "", "", "", "n", "l", "r", "s", "ck", "nd", "m"]


def words_of(pairs: list[list[str]]) -> set[str]:
    return {w for pair in pairs for side in pair for w in re.findall(r"\w+", side)}


def made_up_names(count: int, exclude: set[str], run: Path, seed: int = 7) -> list[str]:
    """Capitalised names of 2-3 random syllables that the corpus does not hold, each cut into
    pieces with rows on both sides of ``run``'s model (none may read or come out as <unk>)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nmt.data.tokenizer import Tokenizer
    tokenizer = Tokenizer(run / "spm.model")
    data = json.loads((run / "data.json").read_text())
    both = set(data["source_pieces"]) & set(data["target_pieces"])
    rng, names = random.Random(seed), set()
    while len(names) < count:
        name = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(rng.choice((2, 2, 2, 3)))).capitalize()
        if name not in exclude and set(tokenizer.encode([name])[0]) <= both:
            names.add(name)
    return sorted(names)


def corpora(corpus: Path, run: Path, work: Path, rate: float) -> tuple[Path, Path, int, list[str]]:
    """RUN's training pairs (the corpus less its held-out sources) as they are, and with the
    name swapped; the count of pairs swapped, and 87 other made-up names, never trained on."""
    plain, swapped = work / "train.tsv", work / "train-swapped.tsv"
    held = {line.split("\t")[0] for name in ("valid.tsv", "test.tsv")
            for line in (run / name).read_text(encoding="utf-8").splitlines()}
    pairs = [line.split("\t")[:2] for line in corpus.read_text(encoding="utf-8").splitlines() if "\t" in line]
    pairs = [p for p in pairs if p[0] not in held]
    corpus_words = words_of(pairs)
    names = made_up_names(2000, corpus_words | set(NAMES), run)
    unseen = made_up_names(len(NAMES), corpus_words | set(NAMES) | set(names), run, seed=99)
    rng, count, out = random.Random(8), 0, []
    pattern = re.compile(rf"\b{SWAPPED}\b")
    for src, tgt in pairs:
        hits = len(pattern.findall(src))
        if hits and hits == len(pattern.findall(tgt)) and rng.random() < rate:
            name = rng.choice(names)
            src, tgt = pattern.sub(name, src), pattern.sub(name, tgt)
            count += 1
        out.append(f"{src}\t{tgt}\n")
    plain.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    swapped.write_text("".join(out), encoding="utf-8")
    return plain, swapped, count, unseen


def copy_rates(run: Path, work: Path, names: list[str], kind: str) -> dict[str, float]:
    """The share of test sentences whose translation holds their name exactly, greedy and beam 5."""
    src = work / f"{kind}.en"
    sentences = [(t.format(n), n) for t in TEMPLATES for n in names]
    src.write_text("".join(s + "\n" for s, _ in sentences), encoding="utf-8")
    rates = {}
    for beam in (1, 5):
        out = nmt("translate", "--checkpoint", run, "--input", src, "--beam", beam).splitlines()
        assert len(out) == len(sentences), "one translation per sentence"
        rates[f"beam {beam}"] = sum(name in hyp for (_, name), hyp in zip(sentences, out)) / len(sentences)
        (work / f"{run.name}-{kind}-beam{beam}.fr").write_text("\n".join(out) + "\n", encoding="utf-8")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/name-copy"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rate", type=float, default=0.5)
    parser.add_argument("--lr", default="5e-4")
    parser.add_argument("--threads", default="0", help="nmt train --threads")
    parser.add_argument("--others", type=Path, nargs="*", default=[],
                        help="other runs whose copying to measure too (e.g. a Transformer)")
    args = parser.parse_args()
    w = args.work
    w.mkdir(parents=True, exist_ok=True)
    held = [w / "valid.src", w / "valid.tgt"]
    lines = (args.run / "valid.tsv").read_text(encoding="utf-8").splitlines()
    for k, f in enumerate(held):
        f.write_text("".join(line.split("\t")[k] + "\n" for line in lines), encoding="utf-8")
    test_src, test_ref = held_out_files(args.run, w)
    plain, swapped, count, unseen = corpora(args.corpus, args.run, w, args.rate)
    print(f"{count:,} pairs with {SWAPPED!r} swapped for one of 2,000 made-up names")
    for name, data in (("control", plain), ("swapped", swapped)):
        train(w / name, args.threads, "--init-from", args.run, "--corpus", data, "--max-steps", args.steps,
              "--lr", args.lr, "--valid-src", held[0], "--valid-tgt", held[1], "--test-src", test_src,
              "--test-tgt", test_ref)
    runs = (args.run, w / "control", w / "swapped")
    for run in (*runs, *args.others):
        for names, kind in ((NAMES, "test"), (unseen, "made-up")):
            rates = copy_rates(run, w, names, kind)
            print(f"{run.name:<12} {kind} names copied: " + ", ".join(f"{k} {v:.1%}" for k, v in rates.items()))
    print_comparison(compare("fine-tuning with swapped names", *runs, "--src", test_src, "--ref", test_ref))


if __name__ == "__main__":
    main()
