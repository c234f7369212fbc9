"""--keep-checkpoints, nmt average and --weights: the kept files survive a resume, the average
is the element-wise mean, every command decodes with any of a run's weights, and files from
another run are refused."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY, clean_error, nmt
from nmt.api import load
from nmt.runtime.weights import available, kept_steps, summary_of

KEEP = ["--keep-checkpoints", "2", "--valid-every", "2"]


@pytest.fixture(scope="module")
def kept_run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run that kept the last two validations' weights, trained 8 steps, then resumed to 12."""
    run = tmp_path_factory.mktemp("kept") / "run"
    result = nmt("train", "--corpus", corpus, "--run-dir", run, "--max-steps", "8", *KEEP, *TINY)
    assert result.returncode == 0, result.stderr
    assert kept_steps(run) == [6, 8]
    result = nmt("train", "--resume", run, "--max-steps", "12")
    assert result.returncode == 0, result.stderr
    return run


def test_the_last_n_validations_are_kept_across_a_resume(kept_run: Path) -> None:
    assert kept_steps(kept_run) == [10, 12]
    assert available(kept_run) == ["averaged", "best", "last", "step-10", "step-12"]
    # the end's average (five validations) reached back across the resume to the kept ones
    assert summary_of(kept_run)["averaged"]["steps"] == [6, 8, 10, 12]


def test_the_average_is_the_mean_of_the_kept_weights(kept_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    result = nmt("average", run, "--last", "2", "-o", "last2")
    assert result.returncode == 0, result.stderr
    a, b = (load_file(run / "checkpoints" / f"step-{k}.safetensors") for k in (10, 12))
    mean = load_file(run / "last2.safetensors")
    assert set(mean) == {k for k in a if k.startswith("model.")}
    for key, value in mean.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, (a[key].double() + b[key].double()).div(2).float())
        else:
            assert torch.equal(value, a[key])
    assert not torch.equal(mean["model.generator.proj.weight"], a["model.generator.proj.weight"])


def test_every_command_decodes_with_the_weights_it_is_given(kept_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    assert nmt("average", run, "--steps", "10,12", "-o", "avg2").returncode == 0
    outputs = {}
    for weights in ("best", "last", "step-10", "avg2"):
        result = nmt("translate", "--checkpoint", run, "--weights", weights, "Tom sees the cat.")
        assert result.returncode == 0, result.stderr
        outputs[weights] = result.stdout
    scores = {w: load(run, "cpu", "fp32", w).score(["Tom sees the cat."], ["Tom voit le chat."])[0]
              for w in ("step-10", "step-12", "avg2")}
    assert len(set(scores.values())) == 3  # three sets of weights, three log-probabilities
    result = nmt("eval", "--checkpoint", run, "--weights", "avg2", "--json")
    assert result.returncode == 0 and '"weights": "avg2"' in result.stdout, result.stderr
    clean_error(nmt("translate", "--checkpoint", run, "--weights", "nope", "x"),
                "--weights nope", "avg2, best, last, step-10, step-12")
    clean_error(nmt("translate", "--checkpoint", run, "--weights", "../last", "x"), "--weights ../last")


def test_averaging_mistakes_are_refused(kept_run: Path, tiny_run: Path, corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    clean_error(nmt("average", run, "--steps", "10,11"), "--steps 10,11", "no step 11", "10, 12")
    clean_error(nmt("average", run, "--last", "3"), "--last 3", "keeps only 2")
    clean_error(nmt("average", run, "--last", "1"), "--last 1")
    for name in ("last", "best", "default", "step-12", "step-999"):
        clean_error(nmt("average", run, "-o", name), f"--output {name}", "the run's own weights")
    clean_error(nmt("average", run), "--output averaged", "training made", "-o NAME")
    shutil.copy(run / "best.safetensors", run / "step-12.safetensors")  # a step name at the top: never read
    assert available(run).count("step-12") == 1
    clean_error(nmt("average", tiny_run), "keeps no checkpoints", "--keep-checkpoints")
    # a step file of another run, put among this run's: refused by its run id
    other = tmp_path / "other"
    assert nmt("train", "--corpus", corpus, "--run-dir", other, "--max-steps", "2", *KEEP, *TINY).returncode == 0
    shutil.copy(other / "checkpoints" / "step-2.safetensors", run / "checkpoints" / "step-2.safetensors")
    clean_error(nmt("average", run, "--steps", "2,12", "-o", "avg"), "step-2.safetensors", "not written by this run")
    assert not (run / "avg.safetensors").exists()
