"""nmt compare through the command line: a trained run against its own weights turned into
noise is significantly better, a run against itself is identical with p = 1; each system is
decoded once and its hypotheses reused; systems are runs, weights, ensembles, exports and
files; every mistake is one line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from conftest import clean_error, make_pairs, nmt, write_tsv

pytestmark = pytest.mark.slow  # trains a run that learns

RUN = ["--device", "cpu", "--precision", "fp32", "--batch-size", "16", "--valid-size", "20", "--valid-bleu-size",
       "20", "--valid-every", "100", "--lr", "0.005", "--embed-size", "32", "--hidden-size", "48", "--layers", "1",
       "--vocab-size", "80", "--keep-checkpoints", "3"]


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    return write_tsv(root / "low.tsv", [(s.lower()[:-1] + " .", t.lower()[:-1] + " .")
                                        for s, t in make_pairs(600, seed=1)])


@pytest.fixture(scope="module")
def trained(lowered: Path) -> Path:
    """A GRU that has learnt something (300 steps), with 120 test pairs held out."""
    run = lowered.parent / "trained"
    result = nmt("train", "--corpus", lowered, "--run-dir", run, "--max-steps", "300", "--test-size", "120", *RUN)
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="module")
def noisy(trained: Path) -> Path:
    """The same run with its default weights replaced by noise of their own scale."""
    run = trained.parent / "noisy"
    shutil.copytree(trained, run, ignore=shutil.ignore_patterns("hypotheses"))
    path = run / f"{json.loads((run / 'run.json').read_text()).get('default_weights', 'best')}.safetensors"
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    generator = torch.Generator().manual_seed(0)
    noise = {k: torch.randn(t.shape, generator=generator) * (t.float().std() + 0.1) if t.is_floating_point() else t
             for k, t in tensors.items()}
    save_file(noise, str(path), meta)
    return run


def _compare(*args: object) -> dict:
    result = nmt("compare", *map(str, args), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_run_beats_its_weights_in_noise_significantly(trained: Path, noisy: Path) -> None:
    out = _compare(noisy, trained, "--metrics", "bleu,chrf,ter")
    assert out["baseline"] == str(noisy) and out["sentences"] > 50
    for metric, scores in out["scores"].items():
        base, other = scores["systems"]
        assert base["p"] is None and other["p"] < 0.05 and other["significant"], metric
        assert (other["delta"] < 0) == (metric == "ter"), metric
        assert base["mean"] - base["ci"] <= base["score"] <= base["mean"] + base["ci"]
    assert f"{trained} is better than {noisy} in BLEU" in out["verdicts"][0]


def test_a_run_against_itself_is_identical_and_decoded_once(trained: Path) -> None:
    first = _compare(trained, trained, "--beam", "2")
    assert [s["name"] for s in first["systems"]] == [str(trained), f"{trained} (2)"]
    [bleu] = first["scores"]["bleu"]["systems"][1:]
    assert bleu["identical"] and bleu["p"] == 1.0 and bleu["delta"] == 0
    assert "identical" in first["verdicts"][0] and "p = 1" in first["verdicts"][0]
    assert [s["cached"] for s in first["systems"]] == [False, True]  # the second mention reads the first's
    again = _compare(trained, trained, "--beam", "2")
    assert [s["cached"] for s in again["systems"]] == [True, True]
    assert again["scores"] == first["scores"]
    assert not any(s["cached"] for s in _compare(trained, trained, "--beam", "3")["systems"][:1])


def test_the_cache_does_not_make_an_old_run_the_newest(trained: Path, noisy: Path, tmp_path: Path) -> None:
    from nmt.inference.loading import latest_run
    root = tmp_path / "checkpoints"
    root.mkdir()
    old, new = root / "old", root / "new"
    shutil.copytree(trained, old, ignore=shutil.ignore_patterns("hypotheses"))
    shutil.copytree(noisy, new, ignore=shutil.ignore_patterns("hypotheses"))
    assert latest_run(root) == new
    _compare(old, new)
    assert (old / "hypotheses").is_dir() and latest_run(root) == new


def test_weights_ensembles_and_files_are_systems(trained: Path, noisy: Path, tmp_path: Path) -> None:
    hyps = tmp_path / "hyps.txt"
    out = nmt("eval", trained, "--hyp-out", hyps)
    assert out.returncode == 0, out.stderr
    result = _compare(trained, f"{trained}@last", f"{trained}+{trained}", hyps, noisy, "--examples", "3")
    assert [s["kind"] for s in result["systems"]] == ["run", "run", "ensemble", "file", "run"]
    base, *others = result["scores"]["bleu"]["systems"]
    assert others[2]["identical"]  # the file holds the run's own hypotheses
    assert len(result["examples"]) == 3  # the noise differs from the run in most sentences
    for example in result["examples"]:
        assert len(example["hypotheses"]) == 5 and len({h["text"] for h in example["hypotheses"]}) > 1


def test_the_terminal_lists_the_examples_and_the_page_is_written(trained: Path, noisy: Path, tmp_path: Path) -> None:
    page = tmp_path / "compare.html"
    result = nmt("compare", trained, noisy, "--examples", "2", "--html", page)
    assert result.returncode == 0, result.stderr
    assert "significant" in result.stdout and result.stdout.count("chrF spread") == 2
    text = page.read_text(encoding="utf-8")
    assert text.count("<article") == 2 and str(noisy) in text


def test_mistakes_are_one_line(trained: Path, lowered: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(trained, other, ignore=shutil.ignore_patterns("hypotheses"))
    (other / "test.tsv").write_text("a .\tun .\n", encoding="utf-8")
    short = tmp_path / "short.txt"
    short.write_text("une ligne\n", encoding="utf-8")
    untested = tmp_path / "untested"
    assert nmt("train", "--corpus", lowered, "--run-dir", untested, "--max-steps", "2", "--test-size", "0",
               *RUN).returncode == 0
    cases = [
        ([trained], "needs two systems or more"),
        ([trained, other], "hold out different test sets"),
        ([trained, short], "has 1 lines but the test set"),
        ([untested, trained], "holds out no test pairs"),
        ([short, short], "files of hypotheses carry no test set"),
        ([trained, tmp_path / "nosuch"], "no such run, export or file"),
        ([trained, f"{trained}@nosuch"], "weights nosuch", "has no such weights; it has"),
        ([trained, trained, "--html", trained / "best.safetensors"], "would overwrite"),
        ([trained, trained, "--html", "-"], "writes a page to a file"),
        ([trained, f"{trained}@best+{trained}"], "give it with --weights"),
        ([trained, trained, "--metrics", "bleu,meteor"], "--metrics"),
        ([trained, trained, "--seed", "0"], "--seed 0"),
        ([trained, trained, "--test", "t"], "--test t"),
        ([trained, trained, "--src", short], "--src and --ref go together"),
    ]
    for args, *needles in cases:
        clean_error(nmt("compare", *map(str, args)), *needles)


def test_an_export_is_a_system_decoded_by_ctranslate2(transformer_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    exported = tmp_path / "ct2"
    assert nmt("export", transformer_run, "-o", exported).returncode == 0
    out = _compare(transformer_run, exported, "--precision", "fp32")
    assert [s["kind"] for s in out["systems"]] == ["run", "export"]
    assert out["scores"]["bleu"]["systems"][1]["identical"]  # CTranslate2 finds nmt's own output
    assert (exported / "hypotheses").is_dir()
    again = _compare(transformer_run, exported, "--precision", "fp32")
    assert [s["cached"] for s in again["systems"]] == [True, True]
