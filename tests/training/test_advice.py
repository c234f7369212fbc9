"""The warnings a run starts with (nmt.training.advice), each in the words the CLI shows."""
import logging

import pytest

from nmt.config import RunConfig
from nmt.errors import SettingMessage
from nmt.training.advice import warn_at_start


def _said(caplog, config, step=0, budget_left=True, total_steps=1000, valid=1000, processes=1):
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        warn_at_start(config, step, budget_left, total_steps, valid, processes)
    return [r.msg.render(lambda name: "--" + name.replace("_", "-")) for r in caplog.records
            if isinstance(r.msg, SettingMessage)]


def test_a_small_validation_set_is_named_by_what_makes_it_small(caplog):
    plain = RunConfig()
    assert _said(caplog, plain, valid=1000) == []
    [carved] = _said(caplog, plain, valid=24)
    assert carved.startswith("--valid-size: the validation set held out of the corpus has 24 pair(s)")
    assert "--valid-size 0 to keep the newest weights" in carved
    [scored] = _said(caplog, plain.replace(valid_bleu_size=50), valid=1000)
    assert scored.startswith("--valid-bleu-size 50: so which weights become best.safetensors")
    assert "the validation set has 1,000: score more of it" in scored
    [given] = _said(caplog, plain.replace(valid_src="v.en", valid_tgt="v.fr"), valid=30)
    assert given.startswith("--valid-src v.en:") and "--valid-size" not in given


def test_a_warm_up_longer_than_the_run_and_a_spent_budget_are_said(caplog):
    noam = RunConfig().replace(schedule="noam", warmup_steps=400, lr=1e-3)
    [warm] = _said(caplog, noam, total_steps=100)
    assert warm == ("--warmup-steps 400: longer than the 100 steps this run takes, so the learning rate stops at "
                    "0.00025 and never reaches --lr 0.001; give fewer warm-up steps or a larger budget")
    assert _said(caplog, noam, total_steps=None) == []  # bound by minutes: its length is unknown
    [spent] = _said(caplog, noam, step=600, budget_left=False)
    assert spent.startswith("the budget is already reached at step 600: --epochs, --max-steps")


@pytest.mark.parametrize("threads, processes, warned", [(0, 4, False), (1, 1, False), (1000, 1, True)])
def test_more_threads_than_cores_are_said(caplog, threads, processes, warned):
    said = _said(caplog, RunConfig().replace(threads=threads), processes=processes)
    assert any(s.startswith(f"--threads {threads}: more threads than the") for s in said) is warned
