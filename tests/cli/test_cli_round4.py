"""Careless use through the command line (reliability, round 4): how a command is given its
run."""
import json

import pytest
from conftest import clean_error, nmt


def test_a_run_is_given_positionally_or_by_checkpoint_alike(tiny_run):
    by_argument, by_flag = nmt("info", tiny_run, "--json"), nmt("info", "--checkpoint", tiny_run, "--json")
    assert by_argument.returncode == by_flag.returncode == 0, by_argument.stderr + by_flag.stderr
    assert json.loads(by_argument.stdout) == json.loads(by_flag.stdout)
    both = nmt("info", tiny_run, "--checkpoint", tiny_run, "--json")  # the same run twice is one
    assert both.returncode == 0 and json.loads(both.stdout) == json.loads(by_flag.stdout)
    scored = [nmt("eval", *args, "--json") for args in ([tiny_run], ["--checkpoint", tiny_run])]
    assert scored[0].returncode == 0, scored[0].stderr
    assert json.loads(scored[0].stdout)["scores"] == json.loads(scored[1].stdout)["scores"]


@pytest.mark.parametrize("command", [["info"], ["serve", "--port", "0"], ["attn-plot", "Hi."], ["demo", "bahdanau"],
                                     ["bench", "--steps", "1"]])
def test_a_second_run_is_refused_where_no_ensemble_is_built(tiny_run, tmp_path, command):
    other = tmp_path / "other"
    result = nmt(*command, "--checkpoint", tiny_run, "--checkpoint", other)
    clean_error(result, f"nmt {command[0]} takes one run, got 2", "ensemble")
    if command[0] in ("info", "serve"):
        clean_error(nmt(*command, tiny_run, "--checkpoint", other), f"nmt {command[0]} takes one run, got 2")
