"""Careless use through the command line (reliability, round 4): how a command is given its
run, and files that are not what they are given as."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY, clean_error, make_pairs, nmt, write_tsv
from nmt.runtime.lock import run_lock


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


def test_a_program_given_as_text_is_called_binary(tmp_path):
    program = Path(sys.executable).resolve()  # an ELF file, whose NULs once passed for UTF-32LE
    corpus = write_tsv(tmp_path / "c.tsv", make_pairs(50))
    for args in (["--corpus", program], ["--config", program], ["--corpus", corpus, "--test-src", program,
                                                                 "--test-tgt", corpus]):
        result = nmt("train", *args, "--run-dir", tmp_path / "run")
        clean_error(result, f"{program}: binary data, not text (")
        assert "UTF-32" not in result.stderr and "iconv" not in result.stderr


def test_data_and_runs_that_are_not_there_are_named_so(tmp_path):
    a_file = write_tsv(tmp_path / "c.tsv", make_pairs(10))
    clean_error(nmt("train", "--data", a_file, "--run-dir", tmp_path / "run"),
                f"{a_file}: not a directory; --data takes a directory made by nmt prepare -o DIR")
    clean_error(nmt("train", "--data", tmp_path / "nosuch", "--run-dir", tmp_path / "run"),
                f"{tmp_path / 'nosuch'}: no such directory; --data takes a directory made by nmt prepare")
    clean_error(nmt("average", tmp_path / "nosuch"), f"{tmp_path / 'nosuch'}: no such run directory")
    clean_error(nmt("average", tmp_path), f"{tmp_path}: not an nmt run directory")


def test_a_corpus_weight_that_yaml_read_as_a_string_is_named(tmp_path):
    corpus = write_tsv(tmp_path / "c.tsv", make_pairs(10))
    config = tmp_path / "c.yaml"
    config.write_text(f"corpus:\n  - path: {corpus}\n    weight: 5e-1\n")
    clean_error(nmt("train", "--config", config, "--run-dir", tmp_path / "run"),
                "--corpus: entry 1's weight must be a number, got the string '5e-1'", "write 0.5")


@pytest.mark.slow  # a process, signalled while it prepares
def test_a_pipe_as_data_is_refused_before_any_work(tmp_path):
    """A corpus is read more than once, so a FIFO or a pipe (which hung, or failed at the end)
    is refused at the start, with nothing written; a pipe as a held-out file too."""
    corpus = write_tsv(tmp_path / "c.tsv", make_pairs(60, seed=4))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["prepare", "--corpus", fifo, "-o", tmp_path / "D"],
                 ["train", "--corpus", fifo, "--run-dir", tmp_path / "R", "--max-steps", "1"]):
        clean_error(nmt(*args), f"--corpus {fifo}: a pipe or device, not a regular file", "save it to a file")
    result = nmt("train", "--corpus", corpus, "--valid-src", "/dev/stdin", "--valid-tgt", corpus,
                 "--run-dir", tmp_path / "R", "--max-steps", "1", stdin=corpus.read_text(), process=True)
    clean_error(result, "--valid-src /dev/stdin: a pipe or device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tsv", "fifo"]


def test_sigterm_during_prepare_leaves_no_partial_directory(tmp_path):
    corpus = write_tsv(tmp_path / "c.tsv", make_pairs(20000, seed=4))
    out = tmp_path / "data"
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "prepare", "--corpus", str(corpus), "-o",
                                str(out), "--vocab-size", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    for _ in range(6000):  # until its partial directory is there (under a minute, however busy the machine)
        if list(tmp_path.glob(".data.partial-*")) or process.poll() is not None:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0 and "Traceback" not in stderr, stderr
    assert not out.exists() and not list(tmp_path.glob(".data.partial-*"))


def test_every_commands_summary_is_one_sentence_on_one_line():
    from nmt.cli.app import app

    for command in app.registered_commands:
        summary, *rest = command.help.split("\n\n")
        name = command.name or command.callback.__name__
        assert len(summary) <= 64 and summary.endswith(".") and summary.count(". ") == 0, (name, summary)
        assert all("\n" not in paragraph for paragraph in rest), name  # the terminal wraps them
    listing = nmt("--help").stdout
    assert all(line.rstrip(" │").endswith(".") for line in listing.splitlines()
               if line.startswith("│ ") and any(f"│ {c.name or c.callback.__name__} " in line
                                                    for c in app.registered_commands))


def test_a_config_cannot_set_what_train_records(tmp_path):
    """vocab, data_sha256, by_corpus_size and the like are what nmt train writes into a run's
    config.yaml from the data: a user's --config giving one is warned about and ignored (so a
    run's config.yaml stays a valid --config), and the list of valid keys does not offer them."""
    corpus = write_tsv(tmp_path / "c.tsv", make_pairs(80, seed=5))
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  vocab: 7\ntrain:\n  by_corpus_size: mine\n", encoding="utf-8")
    result = nmt("train", "--config", config, "--corpus", corpus, "--run-dir", tmp_path / "R", *TINY,
                 "--max-steps", "1")
    assert result.returncode == 0, result.stderr
    assert "by_corpus_size, vocab recorded by nmt train from the data, not settings; ignored" in \
        " ".join(result.stderr.split())
    saved = yaml.safe_load((tmp_path / "R" / "config.yaml").read_text(encoding="utf-8"))
    assert saved["model"]["vocab"] > 7 and saved["train"]["by_corpus_size"] != "mine"
    config.write_text("no_such_key: 1\n", encoding="utf-8")
    result = nmt("prepare", "--config", config, "-o", tmp_path / "D")
    clean_error(result, "unknown config key 'no_such_key'", "vocab_size")
    assert "data_sha256" not in result.stderr and "by_corpus_size" not in result.stderr


def test_a_small_corpus_widens_the_gru_and_info_says_so(tmp_path):
    """Under 50,000 pairs a GRU whose sizes are not given is 512 wide, tied (docs/gru-width.md);
    told to tie, a size not given follows the one given instead."""
    corpus = write_tsv(tmp_path / "c.tsv", make_pairs(80, seed=5))
    sized = ("--embed-size", "--hidden-size")
    unsized = [a for k, a in enumerate(TINY) if a not in sized and TINY[k - 1] not in sized]
    cards = {}
    for name, flags in (("wide", []), ("told", ["--hidden-size", "16", "--tie-embeddings"])):
        result = nmt("train", "--corpus", corpus, "--run-dir", tmp_path / name, *unsized, *flags, "--max-steps", "1")
        assert result.returncode == 0, result.stderr
        cards[name] = json.loads(nmt("info", "--checkpoint", tmp_path / name, "--json").stdout)
        assert "tied decoder embeddings" in cards[name]["architecture"]
    assert (cards["wide"]["sizes"]["embed"], cards["wide"]["sizes"]["hidden"]) == (512, 512)
    assert "embed_size 512, hidden_size 512 (" in cards["wide"]["training"]["set by corpus size"]
    assert (cards["told"]["sizes"]["embed"], cards["told"]["sizes"]["hidden"]) == (16, 16)


def test_info_on_a_run_training_now_says_so(tiny_run, tmp_path):
    """While a process holds the run's lock, info says it is training, with its latest
    validation's step, instead of None and 'stopped by unknown'; once the lock goes, as before."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "run.json").unlink()  # written at a session's end
    last = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    with run_lock(run):
        result = nmt("info", run, "--json")
    assert result.returncode == 0, result.stderr
    card = json.loads(result.stdout)
    assert card["status"].startswith(f"training now (PID {os.getpid()} holds its lock): step {last['step']:,}")
    assert "stopped by" not in card["training"] and None not in card["training"].values()
    card = json.loads(nmt("info", run, "--json").stdout)
    assert "status" not in card and card["training"]["stopped by"].startswith("unknown")
