"""Faults and bad input through the real command line: interrupts, damaged or hostile
checkpoints, malformed corpora, odd text, unwritable outputs."""
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from conftest import ROOT, TINY, make_pairs, nmt

from nmt.runtime import checkpoint

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers


def _start_training(corpus, run, log, *extra):
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "train", "--corpus", str(corpus),
                             "--run-dir", str(run), "--max-steps", "100000", "--epochs", "1000", *TINY,
                             *extra], stdout=subprocess.DEVNULL, stderr=open(log, "w"), cwd=ROOT)


def _saved_step(run):
    _, meta = checkpoint.read_header(run / "last.safetensors")
    return checkpoint.train_state(meta, run)["step"]


def _wait_for(path, text, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}: {path.read_text()}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_checkpoint_and_resume_continues(corpus, tmp_path, sig):
    run, log = tmp_path / "run", tmp_path / "log"
    process = _start_training(corpus, run, log)
    _wait_for(log, "training on")
    time.sleep(1.5)
    process.send_signal(sig)
    assert process.wait(timeout=60) == 0, log.read_text()
    assert "received" in log.read_text() and "Traceback" not in log.read_text()
    assert "BLEU -1" not in log.read_text()  # no sentinel when it stopped before validating
    step = _saved_step(run)
    assert step > 0
    result = nmt("train", "--resume", str(run), "--max-steps", str(step + 20))
    assert result.returncode == 0, result.stderr
    assert _saved_step(run) == step + 20


def test_kill_9_during_training_leaves_a_loadable_checkpoint(corpus, tmp_path):
    run, log = tmp_path / "run", tmp_path / "log"
    process = _start_training(corpus, run, log, "--valid-every", "1")  # saves at every step
    deadline = time.time() + 120
    while not (run / "last.safetensors").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # into the steps that follow: saves keep coming while it is killed
    process.kill()
    process.wait()
    step = _saved_step(run)  # a complete checkpoint, whatever the moment of the kill
    result = nmt("train", "--resume", str(run), "--max-steps", str(step + 3))
    assert result.returncode == 0, result.stderr
    assert _saved_step(run) == step + 3
    # it went on from the saved step as if never killed: the weights of a run trained straight there
    straight = tmp_path / "straight"
    result = nmt("train", "--corpus", corpus, "--run-dir", straight, "--max-steps", str(step + 3), "--epochs", "1000",
                 *TINY, "--valid-every", "1")
    assert result.returncode == 0, result.stderr
    resumed, reference = load_file(run / "last.safetensors"), load_file(straight / "last.safetensors")
    weights = [key for key in reference if key.startswith("model.")]
    assert weights and all(torch.equal(resumed[key], reference[key]) for key in weights)
    result = nmt("translate", "--checkpoint", str(run), "Tom sees the cat.")
    assert result.returncode == 0 and result.stdout.strip(), result.stderr


def test_truncated_checkpoint_is_named_in_a_clear_error(tiny_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.yaml", "spm.model"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    (run / "best.safetensors").write_bytes((tiny_run / "best.safetensors").read_bytes()[:1000])
    result = nmt("translate", "--checkpoint", str(run), "hello")
    assert result.returncode == 1
    assert "best.safetensors: truncated or corrupted" in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr


def test_incompatible_run_directory_says_so(tiny_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("spm.model", "best.safetensors"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    (run / "config.yaml").write_text("model:\n  attention_heads: 8\n")
    result = nmt("translate", "--checkpoint", str(run), "hello")
    assert result.returncode == 1 and "incompatible nmt version" in result.stderr.replace("\n", " ")


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch /tmp/nmt-cli-pwned",))


def test_a_pickle_payload_in_a_run_directory_never_runs(tiny_run, tmp_path):
    marker = Path("/tmp/nmt-cli-pwned")
    marker.unlink(missing_ok=True)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.yaml", "spm.model"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    for name in ("best.safetensors", "last.safetensors"):
        (run / name).write_bytes(pickle.dumps(_Payload()))
    for args in (["translate", "--checkpoint", str(run), "hello"], ["train", "--resume", str(run)],
                 ["info", "--checkpoint", str(run)]):
        result = nmt(*args)
        assert result.returncode == 1 and "safetensors" in result.stderr
    assert not marker.exists()


def test_bad_corpus_lines_are_counted_and_strict_refuses(tmp_path):
    good = make_pairs(120, seed=4)
    lines = [f"{s}\t{t}".encode() for s, t in good]
    lines[3] = b"no tab on this line"
    lines[10] = b"\tempty source"
    lines[11] = b"source only\t   "
    lines[20] = b"bad \xff byte\tx"
    lines[30] = b"x" * 9000 + b"\ty"
    corpus = tmp_path / "bad.tsv"
    corpus.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n")
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(tmp_path / "r"), "--max-steps", "1", *TINY)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stderr.split())
    assert "kept 115 pairs" in text
    for expected in ("2 empty side (lines 11, 12)", "1 lines without a tab (lines 4)",
                     "1 invalid UTF-8 (lines 21)", "1 over-long lines (lines 31)"):
        assert expected in text
    strict = nmt("train", "--corpus", str(corpus), "--run-dir", str(tmp_path / "s"), "--strict", *TINY)
    assert strict.returncode == 1 and strict.stderr.startswith("error: --strict")
    assert not (tmp_path / "s").exists()  # nothing half-written


def test_aligned_files_with_different_line_counts(tmp_path):
    (tmp_path / "a.en").write_text("a\nb\nc\n")
    (tmp_path / "a.fr").write_text("a\nb\n")
    result = nmt("train", "--src-file", str(tmp_path / "a.en"), "--tgt-file", str(tmp_path / "a.fr"),
                 "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 1 and "has 3 lines" in result.stderr and "has 2" in result.stderr


def test_odd_and_huge_translate_inputs_keep_line_counts(tiny_run, tmp_path):
    odd = ["", "   ", "😀🚀 emoji only", "Привет мир", "中文句子", "x" * 5000, "Tom sees the cat.", "\t"]
    path = tmp_path / "odd.txt"
    path.write_text("\n".join(odd) + "\n", encoding="utf-8")
    result = nmt("translate", "--checkpoint", str(tiny_run), "--input", str(path), "--beam", "3")
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n")[:-1]
    assert len(out) == len(odd) and out[0] == out[1] == out[7] == ""
    big = tmp_path / "big.txt"
    big.write_text("".join(f"Tom sees the cat {i}.\n" if i % 7 else "\n" for i in range(100_000)))
    result = nmt("translate", "--checkpoint", str(tiny_run), "--input", str(big), "--output",
                 str(tmp_path / "big.out"), "--batch-size", "256")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "big.out").read_text().count("\n") == 100_000


@pytest.mark.parametrize("args, message", [
    (["translate", "--checkpoint", "{run}", "--input", "{tmp}"], "is a directory"),
    (["translate", "--checkpoint", "{run}", "--input", "{tmp}/missing.txt"], "missing.txt: no such file"),
    (["translate", "--checkpoint", "{run}", "hi", "--output", "{tmp}/no/such/dir/out.txt"], "--output"),
    (["translate", "--checkpoint", "{run}", "hi", "--output", "{tmp}"], "is a directory"),
    (["translate", "--checkpoint", "{run}", "hi", "--input", "{tmp}/x"], "not both"),
    (["translate", "--checkpoint", "{run}", "hi", "--device", "cuda"], "CUDA is not available"),
    (["translate", "--checkpoint", "{run}", "hi", "--nbest", "3", "--beam", "2"], "--nbest"),
    (["translate", "--checkpoint", "{tmp}/missing.txt", "hi"], "not a run directory"),
    (["train", "--corpus", "{tmp}", "--run-dir", "{tmp}/r"], "is a directory"),
    (["train", "--corpus", "a.tsv", "--src-file", "b", "--tgt-file", "c"], "not both"),
    (["train", "--resume", "{run}", "--hidden-size", "8"], "--resume"),
    (["train", "--run-dir", "{run}", "--corpus", "x"], "not empty"),
    (["train", "--config", "{tmp}/none.yaml"], "none.yaml"),
    (["eval", "--checkpoint", "{run}", "--src", "{tmp}/x"], "--src and --ref go together"),
    (["attn-plot", "--checkpoint", "{run}", "hi", "-o", "{tmp}/a.bmp"], "unknown figure format"),
    (["attn-plot", "--checkpoint", "{run}", "\u200b", "-o", "{tmp}/a.png"], "some text"),
    (["eval", "--checkpoint", "{run}", "--batch-size", "0"], "--batch-size 0: must be >= 1"),
    (["translate", "--checkpoint", "{run}", "hi", "--beam", "0"], "--beam 0: must be >= 1"),
    (["bench", "--steps", "0"], "--steps 0: must be >= 1"),
    (["train", "--config", "{cfg}"], "--embed-size: must be int"),
])
def test_user_mistakes_give_one_clear_line(tiny_run, tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("embed_size: 8.5\n")
    result = nmt(*[a.format(tmp=tmp_path, run=tiny_run, cfg=tmp_path / "bad.yaml") for a in args])
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error:") and message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("**/*.tmp")) and not (tmp_path / "r").exists()


def test_a_reader_that_stops_early_is_not_an_error(tiny_run, tmp_path):
    lines = tmp_path / "in.txt"
    lines.write_text("Tom sees the cat.\n" * 3000)
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "translate", "--checkpoint",
                                str(tiny_run), "--input", str(lines)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=ROOT)
    assert process.stdout.readline()
    process.stdout.close()  # like `| head -1`
    assert process.wait(timeout=120) == 0
    assert b"Traceback" not in process.stderr.read()
