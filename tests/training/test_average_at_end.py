"""The end of a run: the last validations' weights averaged, scored on validation, the run's
default weights when they score better than best; the kept files then deleted unless asked for."""
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import tiny_config
from nmt.errors import ConfigError
from nmt.api import load
from nmt.runtime.weights import default_weights, kept_steps, summary_of, weights_path
from nmt.tools.inspect import model_card
from nmt.training.runs import resume_run, train_new_run


def _config(corpus, **extra):
    return tiny_config(corpus, **{"max_steps": 10, "valid_every": 2, "lr": 0.02, **extra})


def test_the_average_is_the_mean_of_the_last_validations_and_is_scored(tmp_path, corpus_file):
    run = tmp_path / "run"
    train_new_run(_config(corpus_file, keep_checkpoints=5), run)
    assert kept_steps(run) == [2, 4, 6, 8, 10]  # asked for: they stay
    kept = [load_file(run / "checkpoints" / f"step-{k}.safetensors") for k in (2, 4, 6, 8, 10)]
    averaged = {k: v for k, v in load_file(run / "averaged.safetensors").items() if k.startswith("model.")}
    assert set(averaged) == {k for k in kept[0] if k.startswith("model.")}
    for key, value in averaged.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, sum(k[key].double() for k in kept).div(5).float())
    summary = summary_of(run)
    assert summary["averaged"]["steps"] == [2, 4, 6, 8, 10]
    better = summary["averaged"]["valid_bleu"] > summary["best_valid_bleu"]
    assert summary["default_weights"] == ("averaged" if better else "best") == default_weights(run)
    assert weights_path(run).name == f"{summary['default_weights']}.safetensors"
    assert load(run, "cpu", "fp32").weights == summary["default_weights"]  # what eval --json names
    assert model_card(run)["default weights"].startswith(summary["default_weights"])


def test_the_average_becomes_the_default_only_when_it_scores_better(tmp_path, corpus_file):
    run = tmp_path / "run"
    train_new_run(_config(corpus_file), run)
    summary = summary_of(run)
    for average, default in ((summary["best_valid_bleu"] + 1, "averaged"), (summary["best_valid_bleu"], "best")):
        # what run.json says decides; a tie keeps best, the weights training selected
        summary |= {"averaged": {**summary["averaged"], "valid_bleu": average},
                    "default_weights": default}
        (run / "run.json").write_text(json.dumps(summary))
        assert weights_path(run) == run / f"{default}.safetensors"
        assert model_card(run)["default weights"].startswith(default)
    (run / "run.json").write_text("{damaged")
    assert weights_path(run) == run / "best.safetensors"


def test_the_kept_files_are_deleted_once_averaged_unless_asked_for(tmp_path, corpus_file):
    run = tmp_path / "run"
    train_new_run(_config(corpus_file), run)
    assert (run / "averaged.safetensors").is_file() and not (run / "checkpoints").exists()
    train_new_run(_config(corpus_file, keep_checkpoints=2), tmp_path / "two")
    assert kept_steps(tmp_path / "two") == [8, 10]
    assert summary_of(tmp_path / "two")["averaged"]["steps"] == [2, 4, 6, 8, 10]


def test_average_last_sets_the_count_and_zero_turns_it_off(tmp_path, corpus_file):
    train_new_run(_config(corpus_file, average_last=3), tmp_path / "three")
    assert summary_of(tmp_path / "three")["averaged"]["steps"] == [6, 8, 10]
    train_new_run(_config(corpus_file, average_last=0), tmp_path / "off")
    summary = summary_of(tmp_path / "off")
    assert "averaged" not in summary and summary["default_weights"] == "best"
    assert not (tmp_path / "off" / "averaged.safetensors").exists() and not (tmp_path / "off" / "checkpoints").exists()
    with pytest.raises(ConfigError, match="average_last"):
        _config(corpus_file, average_last=1)


def test_a_stop_signal_leaves_the_kept_weights_for_the_resume(tmp_path, corpus_file, monkeypatch):
    from nmt.training import trainer as trainer_module

    train_new_run(_config(corpus_file), tmp_path / "whole")
    run = tmp_path / "run"
    original = trainer_module.Trainer.train_step

    def interrupted(self, group):
        loss = original(self, group)
        if self.state.step == 5:
            self.signal = 2  # SIGINT during step 6: the ranks agree on it, and stop, at step 7
        return loss

    monkeypatch.setattr(trainer_module.Trainer, "train_step", interrupted)
    train_new_run(_config(corpus_file), run)
    assert kept_steps(run) == [2, 4, 6] and not (run / "averaged.safetensors").exists()
    assert summary_of(run)["default_weights"] == "best"
    monkeypatch.setattr(trainer_module.Trainer, "train_step", original)
    resume_run(run, {})
    # the average spans the interruption as the uninterrupted run's does, to the bit
    assert summary_of(run)["averaged"] == summary_of(tmp_path / "whole")["averaged"]
    a, b = (load_file(r / "averaged.safetensors") for r in (run, tmp_path / "whole"))
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("model."))
    assert not (run / "checkpoints").exists()
