"""Hostile and careless use through the real command line (reliability, round 3): endless or
binary config files, corpora in UTF-16, interrupts during scoring, and the warnings a new user
needs before a run goes quietly wrong. The launcher's cases are in test_distributed.py, the
service's in test_serve.py, the Python API's in test_api.py."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, TINY, clean_error, make_pairs, nmt
from safetensors import safe_open
from safetensors.torch import save_file

from nmt.data.tokenizer import EOS_ID

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers


# --- config files -----------------------------------------------------------------------

def test_an_endless_huge_or_binary_config_is_refused_at_once(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "w") as f:  # a 54 MB list of 13.6 million items parsed for minutes
        f.write("- 1\n" * 13_600_000)
    utf16 = tmp_path / "u16.yaml"
    utf16.write_bytes("lr: 0.001\n".encode("utf-16"))
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    cases = [("/dev/zero", "over 1,048,576 bytes"), (huge, "over 1,048,576 bytes"),
             (utf16, "not UTF-8 text (UTF-16; convert it first: iconv -f utf-16 -t utf-8"),
             (binary, "binary data, not text (12% of its first 1,024 bytes are control bytes)"),
             (tmp_path, "is a directory")]
    aliases = tmp_path / "aliases.yaml"  # 482 bytes that print as gigabytes
    aliases.write_text("lr: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"x{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]\n" for k in range(1, 10)))
    cases.append((aliases, "YAML aliases (*name) are not allowed"))
    for path, needle in cases:
        start = time.monotonic()
        result = nmt("train", "--config", path, "--run-dir", tmp_path / "run")
        assert time.monotonic() - start < 30  # a guard against hanging on /dev/zero, not a speed claim
        clean_error(result, f"{path}: {needle}")
    assert not (tmp_path / "run").exists()
    listed = tmp_path / "list.yaml"
    listed.write_text("lr: [" + ", ".join(["1"] * 100_000) + "]\n")
    result = nmt("train", "--config", listed, "--run-dir", tmp_path / "run")
    clean_error(result, "--lr: must be float, got [1, 1, 1, 1, 1, ...]")
    assert len(result.stderr) < 200


# --- corpora ----------------------------------------------------------------------------

@pytest.mark.parametrize("encoding, named", [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE"),
                                             ("utf-16-be", "UTF-16BE"), ("utf-32", "UTF-32")])
def test_a_utf16_corpus_is_refused_naming_the_encoding(tmp_path, encoding, named):
    text = "".join(f"{s}\t{t}\n" for s, t in make_pairs(300))
    corpus = tmp_path / "wide.tsv"
    corpus.write_bytes(text.encode(encoding))
    clean_error(nmt("train", "--corpus", corpus, "--run-dir", tmp_path / "run", "--max-steps", "1", *TINY),
                 f"{corpus}: {named} text, not UTF-8", f"iconv -f {named.lower()} -t utf-8 {corpus}")
    assert not (tmp_path / "run").exists()


def test_utf16_on_stdin_is_refused_naming_the_encoding(tiny_run):
    piped = subprocess.run([sys.executable, str(ROOT / "cli.py"), "translate", "--checkpoint", str(tiny_run)],
                           input="Tom sees the cat.\nI am cold.\n".encode("utf-16"), capture_output=True)
    assert piped.returncode == 1 and piped.stdout == b""
    assert piped.stderr.decode() == "error: stdin: UTF-16 text, not UTF-8; pipe it through iconv -f utf-16 -t utf-8\n"


def test_no_nul_byte_reaches_a_runs_files(tmp_path):
    pairs = make_pairs(300)
    lines = [f"{s}\t{t}".encode() for s, t in pairs]
    lines[3] = b"Tom\x00 sees\tTom\x00 voit"  # UTF-8 all the same
    corpus = tmp_path / "nul.tsv"
    corpus.write_bytes(b"\n".join(lines) + b"\n")
    result = nmt("train", "--corpus", corpus, "--run-dir", tmp_path / "run", "--max-steps", "1", *TINY)
    assert result.returncode == 0, result.stderr
    assert "1 NUL bytes (lines 4)" in " ".join(result.stderr.split())
    for name in ("valid.tsv", "test.tsv", "config.yaml"):
        assert b"\x00" not in (tmp_path / "run" / name).read_bytes()


# --- interrupts -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slow_run(corpus, tmp_path_factory):
    """A run whose outputs never end, so that decoding long lines takes half a minute: its
    output layer's bias for </s> is -1e4, and every output runs to the length cap (an
    untrained model's own lengths hang on rounding: one piece in one process, the cap in
    another)."""
    run = tmp_path_factory.mktemp("slow") / "run"
    sizes = [*TINY, "--embed-size", "256", "--hidden-size", "512", "--layers", "2"]
    result = nmt("train", "--corpus", corpus, "--run-dir", run, "--max-steps", "1", *sizes)
    assert result.returncode == 0, result.stderr
    path = run / "best.safetensors"
    with safe_open(str(path), "pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    rows = tensors["model.generator.pieces.pieces"]
    tensors["model.generator.proj.bias"][rows == EOS_ID] = -1e4
    save_file(tensors, str(path), meta)
    return run


def _process(pid: int) -> tuple[str, float]:
    """A process's state (``Z`` once it has exited, until it is reaped) and the CPU time its
    threads have used, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return fields[0], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's CPU time from /proc")
@pytest.mark.parametrize("command", [["eval", "--bleu"], ["translate", "--beam", "2", "--output", "{out}"]])
def test_ctrl_c_stops_decoding_within_a_step_on_every_worker(slow_run, tmp_path, command):
    """Measured in the CPU time the process spends after the signal, which other processes on
    the same cores do not inflate as they do wall time: a step and the way out take under a
    CPU second (0.8-0.9 beside two busy loops); a worker that decoded its share on took 18-32 s
    of wall time idle (36-64 CPU s)."""
    long = tmp_path / "long.en"
    long.write_text("".join(" ".join(s for s, _ in make_pairs(12, seed=k)) + "\n" for k in range(300)))
    args = [a.replace("{out}", str(tmp_path / "out.fr")) for a in command]
    files = ["--src", long, "--ref", long] if command[0] == "eval" else ["--input", long]
    # Ctrl-C as a terminal delivers it: to a process that has not inherited SIGINT ignored, as a
    # job started with & by a script does (Python then installs no KeyboardInterrupt handler)
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args, "--checkpoint", str(slow_run),
                                *map(str, files), "--device", "cpu"], stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300  # hang guards only
    while _process(process.pid)[1] < 6:  # loaded (about 3 CPU s) and decoding
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
        time.sleep(0.1)
    _, before = _process(process.pid)
    process.send_signal(signal.SIGINT)
    while (state := _process(process.pid))[0] != "Z":  # exited, not yet reaped: its final CPU time
        assert time.monotonic() < deadline, "no exit after Ctrl-C"
        time.sleep(0.05)
    stderr = process.communicate()[1]
    assert process.returncode == 130 and stderr.strip().endswith("interrupted"), stderr
    assert not (tmp_path / "out.fr").exists()
    assert state[1] - before < 6, f"{state[1] - before:.1f} CPU s after the signal"


# --- held-out sets ----------------------------------------------------------------------

def _aligned(tmp_path, name, pairs):
    (tmp_path / f"{name}.en").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / f"{name}.fr").write_text("".join(t + "\n" for _, t in pairs))
    return [str(tmp_path / f"{name}.en"), str(tmp_path / f"{name}.fr")]


def test_a_test_set_that_training_has_is_refused_and_a_partial_one_is_counted(tmp_path):
    pairs = make_pairs(300, seed=3)
    train = _aligned(tmp_path, "train", pairs)
    same = nmt("train", "--src-file", train[0], "--tgt-file", train[1], "--test-src", train[0],
               "--test-tgt", train[1], "--run-dir", tmp_path / "same", "--max-steps", "1", *TINY)
    clean_error(same, "--test-src:", "(100%) also occur in the training corpus", "--allow-overlap")
    assert not (tmp_path / "same").exists()
    fresh = make_pairs(40, seed=77)
    distinct = {s for s, _ in fresh} - {s for s, _ in pairs}
    test = _aligned(tmp_path, "test", fresh)
    run = tmp_path / "run"
    partial = nmt("train", "--src-file", train[0], "--tgt-file", train[1], "--test-src", test[0],
                  "--test-tgt", test[1], "--run-dir", run, "--max-steps", "1", *TINY)
    assert partial.returncode == 0, partial.stderr
    sources = len({s for s, _ in fresh})
    shared = sources - len(distinct)
    assert 0 < shared < sources
    said = " ".join(partial.stderr.split())
    assert f"{shared} of {sources} test sources ({100 * shared // sources}%) also occur in the training corpus" in said
    info = nmt("info", "--checkpoint", run, "--json")
    import json
    assert f"{shared} of its {sources} sources ({100 * shared // sources}%) also in the training corpus" in \
        json.loads(info.stdout)["test set"]
    allowed = nmt("train", "--src-file", train[0], "--tgt-file", train[1], "--test-src", train[0],
                  "--test-tgt", train[1], "--run-dir", tmp_path / "allowed", "--max-steps", "1",
                  "--allow-overlap", *TINY)
    assert allowed.returncode == 0 and "(100%) also occur" in " ".join(allowed.stderr.split())


# --- what a new user trips over ---------------------------------------------------------

def test_settings_that_quietly_go_wrong_are_warned_about_by_flag(corpus, tmp_path):
    run = tmp_path / "run"
    sizes = [a if a not in ("8", "12") else "16" for a in TINY]
    result = nmt("train", "--corpus", corpus, "--run-dir", run, "--max-steps", "3", *sizes, "--arch",
                 "transformer", "--heads", "2", "--ff-size", "16", "--vocab-size", "100000", "--test-size",
                 "100000", "--threads", "1000")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    for warning in ["--vocab-size 100000: a unigram vocabulary ends where", "--test-size 100000: a held-out "
                    "set takes at most a tenth of the corpus's distinct source sentences: this corpus gives 2",
                    "--threads 1000: more threads than the", "--warmup-steps 400: longer than the 3 steps",
                    "never reaches --lr 0.001", "--valid-size: the validation set held out of the corpus has 5 "
                    "pair(s)", "--valid-size 0 to keep the newest weights"]:
        assert warning in said, warning
    assert "--valid-size 5:" not in said and said.count("--threads 1000") == 1
    again = nmt("train", "--resume", run, "--max-steps", "3")
    assert again.returncode == 0
    assert "the budget is already reached at step 3: --epochs, --max-steps and --max-minutes" in \
        " ".join(again.stderr.split())


@pytest.mark.parametrize("args, message", [
    (["--arch", "transformer", "--heads", "0"], "--heads 0: must be >= 1"),
    (["--arch", "transformer", "--hidden-size", "30", "--embed-size", "30", "--heads", "4"],
     "--hidden-size 30: must be a multiple of --heads (4)"),
    (["--tie-embeddings", "--embed-size", "128", "--hidden-size", "256"],
     "--tie-embeddings: the output layer reads --hidden-size (256) values: tying needs --embed-size (128) equal to it"),
])
def test_config_errors_name_the_flags_typed(tmp_path, args, message):
    clean_error(nmt("train", "--run-dir", tmp_path / "r", *args), message)


def test_init_range_and_empty_given_sets_are_clear(corpus, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("init_range: 1000\n")
    clean_error(nmt("train", "--config", config, "--run-dir", tmp_path / "r"), "init_range 1000: must be in [0, 1]")
    (tmp_path / "v.en").write_text("")
    (tmp_path / "v.fr").write_text("")
    clean_error(nmt("train", "--corpus", corpus, "--run-dir", tmp_path / "r", "--valid-src", tmp_path / "v.en",
                     "--valid-tgt", tmp_path / "v.fr", *TINY),
                 f"--valid-src {tmp_path / 'v.en'}: empty (with --valid-tgt {tmp_path / 'v.fr'}); a validation set "
                 "needs at least one pair")


def test_without_checkpoint_the_newest_run_with_weights_is_used_and_named(tiny_run, tmp_path):
    import os
    import shutil
    shutil.copytree(tiny_run, tmp_path / "checkpoints" / "done")
    started = tmp_path / "checkpoints" / "started"  # a run still before its first checkpoint
    started.mkdir()
    shutil.copy(tiny_run / "config.yaml", started / "config.yaml")
    old = time.time() - 60
    for path in (tmp_path / "checkpoints" / "done").iterdir():
        os.utime(path, (old, old))
    translated = nmt("translate", "Tom sees the cat.", cwd=tmp_path)
    assert translated.returncode == 0, translated.stderr
    assert "using checkpoints/done, the newest run in checkpoints/ with best.safetensors" in \
        " ".join(translated.stderr.split())
    info = nmt("info", "--json", cwd=tmp_path)
    assert info.returncode == 0 and '"run": "checkpoints/done"' in info.stdout
    (tmp_path / "checkpoints" / "done" / "best.safetensors").unlink()
    clean_error(nmt("translate", "hi", cwd=tmp_path), "no trained run found in checkpoints/ (the runs there "
                 "have no best.safetensors yet)")


def test_a_diverged_demo_says_so_and_a_long_one_reports_progress(tmp_path):
    result = nmt("demo", "pooling", "--lr", "1e30", "-o", tmp_path / "p.png")
    assert result.returncode == 0  # the figure is drawn all the same, and the numbers printed
    assert "--lr 1e+30: the learned width diverged" in " ".join(result.stderr.split())
    from nmt.demos import pooling
    seen = []
    pooling.fit(epochs=7, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(k, 7) for k in range(1, 8)]
