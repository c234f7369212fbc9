"""--tensorboard: the event files hold what metrics.jsonl holds, read back with tensorboard's
own EventAccumulator; a resumed run appends without a step twice; without the package the flag
says how to install it."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import TINY, clean_error, nmt


def _events(run: Path) -> EventAccumulator:
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def test_events_match_the_metrics_and_a_resume_appends(corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    flags = ["--corpus", corpus, "--run-dir", run, "--valid-every", "3", "--tensorboard", *TINY]
    assert nmt("train", *flags, "--max-steps", "6").returncode == 0
    result = nmt("train", "--resume", run, "--max-steps", "9")
    assert result.returncode == 0, result.stderr
    events = _events(run)
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, 10))  # each step once, across the resume
    for tag in ("train/lr", "train/grad_norm", "train/tokens_per_s"):
        assert len(events.Scalars(tag)) == 9
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # metrics.jsonl's train_loss is the mean of the steps since the validation before
    first = {e.step: e.value for e in losses}
    assert abs(records[0]["train_loss"] - sum(first[s] for s in (1, 2, 3)) / 3) < 1e-3
    for key in ("valid_loss", "valid_bleu", "valid_ppl"):
        logged = {e.step: e.value for e in events.Scalars(key.replace("_", "/", 1))}
        assert logged.keys() == {r["step"] for r in records}
        for r in records:
            assert abs(logged[r["step"]] - r[key]) <= 1e-3 * max(1.0, abs(r[key]))
    assert events.Tags()["tensors"] and "valid/samples/text_summary" in events.Tags()["tensors"]


def test_without_the_package_the_flag_says_how_to_install(corpus: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocked" / "tensorboard"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), *sys.path])}
    result = nmt("train", "--corpus", corpus, "--run-dir", tmp_path / "run", "--tensorboard", "--max-steps", "1",
                 *TINY, env=env)
    clean_error(result, "--tensorboard", 'pip install -e ".[tensorboard]"')


def test_a_file_where_the_event_folder_goes_is_named(corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert nmt("train", "--corpus", corpus, "--run-dir", run, "--tensorboard", "--max-steps", "2", *TINY).returncode == 0
    last = (run / "last.safetensors").read_bytes()
    for event in (run / "tensorboard").iterdir():
        event.unlink()
    (run / "tensorboard").rmdir()
    (run / "tensorboard").write_text("not a folder")
    result = nmt("train", "--resume", run, "--max-steps", "4")
    clean_error(result, f"{run / 'tensorboard'}, which is a file, not a directory")
    assert (run / "last.safetensors").read_bytes() == last  # nothing lost
