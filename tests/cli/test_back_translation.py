"""Back-translation, the recipe of docs/back-translation.md through the CLI: a reverse run,
sampled translations of target-side text, and a forward run on the real and the tagged
synthetic pairs (tiny models; the measurement is benchmarks/back_translation.py's)."""
import json

from conftest import TINY, nmt, write_tsv


def _train(*args):
    result = nmt("train", "--max-steps", "6", *TINY, *args)
    assert result.returncode == 0, result.stderr


def _sample(run, source, output, seed):
    result = nmt("translate", "--checkpoint", run, "--input", source, "--output", output, "--sample", "--top-k", "10",
                 "--seed", str(seed))
    assert result.returncode == 0, result.stderr
    return output.read_text(encoding="utf-8").splitlines()


def test_the_back_translation_recipe_runs_as_documented(tmp_path, corpus):
    pairs = [tuple(line.split("\t")) for line in corpus.read_text(encoding="utf-8").splitlines()]
    real = write_tsv(tmp_path / "real.tsv", pairs[:200])
    french = tmp_path / "mono.fr"
    french.write_text("".join(fr + "\n" for _, fr in pairs[200:]) + "\n", encoding="utf-8")  # an empty line too
    reverse = tmp_path / "fr-en"
    _train("--corpus", real, "--reverse", "--run-dir", reverse)
    assert "reverse: true" in (reverse / "config.yaml").read_text()

    english = _sample(reverse, french, tmp_path / "bt.en", seed=1)
    assert len(english) == len(pairs) - 200 + 1  # a line for every line, the empty one included
    assert english == _sample(reverse, french, tmp_path / "again.en", seed=1)
    assert english != _sample(reverse, french, tmp_path / "other.en", seed=2)

    synthetic = tmp_path / "synthetic.tsv"  # paste bt.en mono.fr, less the pairs with an empty side
    synthetic.write_text("".join(f"{en}\t{fr}\n" for en, fr in zip(english, french.read_text().splitlines())
                                 if en.strip() and fr.strip()), encoding="utf-8")
    config = tmp_path / "bt.yaml"
    config.write_text(f"corpus:\n  - {real}\n  - {{path: {synthetic}, weight: 0.5, tag: <bt>}}\n")
    forward = tmp_path / "en-fr"
    _train("--config", config, "--run-dir", forward)
    corpora = json.loads((forward / "data.json").read_text())["corpora"]
    assert [c.get("tag") for c in corpora] == [None, "<bt>"]
    assert corpora[1]["read"] == len(synthetic.read_text().splitlines()) and corpora[1]["train"] > 0
    result = nmt("translate", "--checkpoint", forward, "Tom sees the cat.")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, result.stderr
