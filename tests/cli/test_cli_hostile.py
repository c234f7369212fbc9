"""Hostile and careless use through the real command line (reliability, round 2): outputs that
are not plain files, two writers in one run, inputs that would exhaust the memory, run files
swapped or damaged, and mistakes that must end in one clear line."""
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import time

import pytest
from conftest import ROOT, TINY, clean_error, make_pairs, nmt, read_only
from PIL import Image
from safetensors.torch import load_file, save_file

from nmt.errors import NmtError
from nmt.runtime import checkpoint
from nmt.training.runs import resume_run

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers


def _copy(run, tmp_path, name="run"):
    shutil.copytree(run, tmp_path / name)
    return tmp_path / name


# --- outputs ------------------------------------------------------------------------------

def test_output_paths_are_written_through_not_replaced(tiny_run, tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old\n")
    target.chmod(0o600)
    os.link(target, tmp_path / "hardlink.txt")
    (tmp_path / "link.txt").symlink_to(target)
    result = nmt("translate", "--checkpoint", str(tiny_run), "Tom sees the cat.", "--output",
                 str(tmp_path / "link.txt"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "link.txt").is_symlink() and target.read_text().count("\n") == 1
    assert target.read_text() != "old\n" and (tmp_path / "hardlink.txt").read_text() == target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    result = nmt("translate", "--checkpoint", str(tiny_run), "hi", "--output", os.devnull)
    assert result.returncode == 0 and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    result = nmt("translate", "--checkpoint", str(tiny_run), "Tom sees the cat.", "--output", "-")
    assert result.returncode == 0 and result.stdout.count("\n") == 1 and not (ROOT / "-").exists()


def test_an_output_that_is_an_input_is_refused(tiny_run, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("Tom sees the cat.\n")
    (tmp_path / "sub").mkdir()
    spelled = tmp_path / "sub" / ".." / "in.en"
    clean_error(nmt("translate", "--checkpoint", str(tiny_run), "--input", str(src), "--output", str(spelled)),
                 "--output", "is the --input file")
    ref = tmp_path / "ref.fr"
    ref.write_text("Tom voit le chat.\n")
    os.link(ref, tmp_path / "ref-link.fr")
    clean_error(nmt("eval", "--checkpoint", str(tiny_run), "--src", str(src), "--ref", str(ref),
                     "--hyp-out", str(tmp_path / "ref-link.fr")), "--hyp-out", "is the --ref file")
    assert src.read_text() == "Tom sees the cat.\n" and ref.read_text() == "Tom voit le chat.\n"


def test_a_full_disk_is_a_clear_error(tiny_run):
    for args in (["translate", "--checkpoint", str(tiny_run), "Tom sees the cat."],
                 ["eval", "--checkpoint", str(tiny_run), "--json"],
                 ["info", "--checkpoint", str(tiny_run)]):
        with open("/dev/full", "w") as full:
            result = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], stdout=full,
                                    stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
        clean_error(result, "cannot write to stdout", "No space left")
    clean_error(nmt("translate", "--checkpoint", str(tiny_run), "hi", "--output", "/dev/full"),
                 "--output /dev/full: cannot write")


def test_bench_checks_its_output_before_measuring(tmp_path):
    with read_only(tmp_path):
        start = time.monotonic()
        result = nmt("bench", "--steps", "1", cwd=tmp_path)
        clean_error(result, "--json-out bench.json: cannot write there")
        assert time.monotonic() - start < 30  # refused up front, not after the training phase


# --- one writer per run ---------------------------------------------------------------------

def _settled(run):
    """The run's files, less the temporaries the live trainer is writing and renaming."""
    return {p.name for p in run.iterdir() if not p.name.endswith(".tmp")}


def test_a_run_directory_has_one_writer_and_a_killed_ones_lock_does_not_block(corpus, tmp_path):
    run, log = tmp_path / "run", tmp_path / "log"
    first = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "train", "--corpus", str(corpus),
                              "--run-dir", str(run), "--max-steps", "100000", "--valid-every", "5", *TINY],
                             stdout=subprocess.DEVNULL, stderr=open(log, "w"), cwd=ROOT)
    try:
        deadline = time.time() + 120
        while not (run / "last.safetensors").exists() and time.time() < deadline:
            time.sleep(0.2)
        before = _settled(run)
        clean_error(nmt("train", "--corpus", str(corpus), "--run-dir", str(run), *TINY),
                     "in use by another nmt process", f"PID {first.pid}")
        clean_error(nmt("train", "--resume", str(run), "--max-steps", "5"), f"PID {first.pid}")
        assert before <= _settled(run)  # the refused ones deleted nothing
        time.sleep(1)
    finally:
        first.kill()
        first.wait()
    assert (run / "train.lock").exists()
    _, meta = checkpoint.read_header(run / "last.safetensors")
    step = checkpoint.train_state(meta, run)["step"]
    result = nmt("train", "--resume", str(run), "--max-steps", str(step + 1))
    assert result.returncode == 0, result.stderr


def test_a_read_only_run_directory_cannot_be_resumed_but_still_translates(tiny_run, tmp_path):
    run = _copy(tiny_run, tmp_path)
    with read_only(run):
        clean_error(nmt("train", "--resume", str(run), "--max-steps", "6"), "cannot write in the run directory")
        result = nmt("translate", "--checkpoint", str(run), "Tom sees the cat.")
        assert result.returncode == 0, result.stderr


# --- inputs that would take the machine -------------------------------------------------------

def test_attention_figures_are_bounded(tiny_run, tmp_path):
    long = " ".join(["Tom sees the big red cat today"] * 43)  # 301 words
    out = tmp_path / "long.png"
    result = nmt("attn-plot", "--checkpoint", str(tiny_run), long, "--beam", "3", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert Image.open(out).size[0] <= 8 * 150 and Image.open(out).size[1] <= 8 * 150
    many = ["Tom sees the cat."] * 12
    result = nmt("attn-plot", "--checkpoint", str(tiny_run), *many, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert Image.open(out).size[0] <= 3 * 8 * 150 and Image.open(out).size[1] <= 4 * 8 * 150
    clean_error(nmt("attn-plot", "--checkpoint", str(tiny_run), *many, "hi", "-o", str(out)),
                 "at most 12 sentences")


def test_endless_input_lines_are_refused(tiny_run, tmp_path):
    clean_error(nmt("translate", "--checkpoint", str(tiny_run), "--input", "/dev/zero"),
                 "/dev/zero: line 1 is longer than")
    with open("/dev/zero", "rb") as zero:
        result = subprocess.run([sys.executable, str(ROOT / "cli.py"), "translate", "--checkpoint",
                                 str(tiny_run)], stdin=zero, capture_output=True, text=True, cwd=ROOT)
    clean_error(result, "stdin: line 1 is longer than")
    clean_error(nmt("train", "--corpus", "/dev/zero", "--run-dir", str(tmp_path / "r"), *TINY),
                 "--corpus /dev/zero: a pipe or device")  # a corpus is read more than once
    endless = tmp_path / "endless.tsv"
    endless.write_bytes(b"a" * (1 << 21) + b"\tb\n")
    clean_error(nmt("train", "--corpus", str(endless), "--run-dir", str(tmp_path / "r"), *TINY),
                f"{endless}: line 1 is longer than")
    assert not (tmp_path / "r").exists()


def _limited_memory():
    """3 GB of address space: enough for nmt on CPU torch, not for the 4.8 GB a hostile size
    would allocate. (A CUDA build maps more at import, so it runs unlimited.)"""
    import torch
    if torch.version.cuda is None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def test_hostile_sizes_are_refused_before_anything_is_allocated(tiny_run, tmp_path):
    huge = _copy(tiny_run, tmp_path, "huge")
    config = (huge / "config.yaml").read_text()
    (huge / "config.yaml").write_text(config.replace("hidden_size: 12", "hidden_size: 40000"))
    result = nmt("translate", "--checkpoint", str(huge), "hi", preexec_fn=_limited_memory)  # 4.8 GB would fail
    clean_error(result, "best.safetensors", "config.yaml needs")
    extra = _copy(tiny_run, tmp_path, "extra")
    tensors = load_file(extra / "best.safetensors")
    meta = _metadata(extra / "best.safetensors")
    save_file({**tensors, "payload": tensors["model.generator.proj.weight"].clone()}, str(extra / "best.safetensors"),
              metadata=meta)
    clean_error(nmt("translate", "--checkpoint", str(extra), "hi"), "unexpected tensor payload")
    fake = _copy(tiny_run, tmp_path, "fake")
    _claim_a_huge_tensor(fake / "best.safetensors")
    clean_error(nmt("translate", "--checkpoint", str(fake), "hi", preexec_fn=_limited_memory),
                 "truncated or corrupted")


def _metadata(path):
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


def _claim_a_huge_tensor(path):
    """Rewrite the header so one tensor claims 8 GB that the file does not hold."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    name = "model.generator.proj.weight"
    begin = header[name]["data_offsets"][0]
    header[name] = {"dtype": "F32", "shape": [2**31], "data_offsets": [begin, begin + 2**33]}
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n:])


# --- a run's files checked against each other -------------------------------------------------

def test_a_swapped_tokenizer_is_refused_everywhere(tiny_run, tmp_path, corpus):
    from nmt.data.tokenizer import Tokenizer
    run = _copy(tiny_run, tmp_path)
    texts = [t for pair in make_pairs(300, seed=9) for t in pair]
    other = Tokenizer.train(texts + ["Zebra quokka yak!"], tmp_path / "other.model", 60)
    shutil.copy(other.model_path, run / "spm.model")
    for args in (["translate", "--checkpoint", str(run), "hi"], ["translate", "--checkpoint", str(run), "hi", "--beam", "2"],
                 ["attn-plot", "--checkpoint", str(run), "hi", "-o", str(tmp_path / "a.png")],
                 ["train", "--resume", str(run), "--max-steps", "6"]):
        clean_error(nmt(*args), "spm.model: not the tokenizer this run was trained with")


def test_a_damaged_resume_state_is_refused_before_the_first_step(tiny_run, tmp_path):
    last = tiny_run / "last.safetensors"
    tensors, meta = load_file(last), _metadata(last)
    groups = json.loads(meta["optim_groups"])
    cases = {
        "groups": ({}, {"optim_groups": "[{\"lr\": \"fast\"}]"}),
        "groups-type": ({}, {"optim_groups": json.dumps([{**groups[0], "betas": 0.9}])}),
        "state": ({}, {"state": "[1, 2]"}),
        "state-type": ({}, {"state": json.dumps({**json.loads(meta["state"]), "step": "four"})}),
        "state-field": ({}, {"state": json.dumps({**json.loads(meta["state"]), "rogue": 1})}),
        "groups-betas": ({}, {"optim_groups": json.dumps([{**groups[0], "betas": [0.9]}])}),
        "optim-shape": ({"optim.0.exp_avg": tensors["optim.0.exp_avg"][:1]}, {}),
        "optim-negative": ({"optim.0.exp_avg_sq": -tensors["optim.0.exp_avg_sq"] - 1}, {}),
        "optim-step": ({"optim.0.step": tensors["optim.0.step"] * 0}, {}),
        "scaler": ({}, {"state": json.dumps({**json.loads(meta["state"]), "scaler": {"scale": 1.0}})}),
    }
    for k, (name, (new_tensors, new_meta)) in enumerate(cases.items()):
        run = _copy(tiny_run, tmp_path, name)
        save_file({**tensors, **new_tensors}, str(run / "last.safetensors"), metadata={**meta, **new_meta})
        before = (run / "last.safetensors").read_bytes()
        if k == 0:  # through the CLI once; the library raises the same error for the others
            clean_error(nmt("train", "--resume", str(run), "--max-steps", "6"), "last.safetensors")
        else:
            with pytest.raises(NmtError, match="last.safetensors"):
                resume_run(run, {"max_steps": 6})
        assert (run / "last.safetensors").read_bytes() == before, name


def test_non_finite_weights_are_refused(tiny_run, tmp_path):
    run = _copy(tiny_run, tmp_path)
    tensors = load_file(run / "best.safetensors")
    tensors["model.decoder.embedding.weight"][3, 2] = float("nan")
    save_file(tensors, str(run / "best.safetensors"), metadata=_metadata(tiny_run / "best.safetensors"))
    for beam in ("1", "3"):
        clean_error(nmt("translate", "--checkpoint", str(run), "hi", "--beam", beam), "not finite")


def test_a_metrics_line_cut_short_is_repaired_on_resume(tiny_run, tmp_path):
    run = _copy(tiny_run, tmp_path)
    later = b'{"step": 9, "valid_loss": 1.0, "valid_bleu": 1.0}\n'  # validated after the checkpoint
    (run / "metrics.jsonl").write_bytes((run / "metrics.jsonl").read_bytes() + later + b'{"step": 10, "valid_lo')
    result = nmt("train", "--resume", str(run), "--max-steps", "6")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 6]


def test_damaged_summaries_give_clear_errors_or_warnings(tiny_run, tmp_path):
    for name, text in (("cut", '{"steps": 4, "corp'), ("list", "[1, 2]")):
        run = _copy(tiny_run, tmp_path, name)
        (run / "run.json").write_text(text)
        clean_error(nmt("info", "--checkpoint", str(run)), "run.json: damaged run summary")
    run = _copy(tiny_run, tmp_path, "utf")
    (run / "metrics.jsonl").write_bytes(b"\xff\xfe garbage\n" + (run / "metrics.jsonl").read_bytes())
    result = nmt("info", "--checkpoint", str(run), "--json")
    assert result.returncode == 0 and "skipped 1 damaged lines" in " ".join(result.stderr.split())
    assert json.loads(result.stdout)["best validation BLEU"] != "none yet"


# --- mistakes that end in one clear line ----------------------------------------------------

def test_invalid_utf8_arguments_are_named(tiny_run, tmp_path):
    for command in (["translate"], ["attn-plot", "-o", str(tmp_path / "a.png")]):
        result = subprocess.run([sys.executable, str(ROOT / "cli.py"), *command, "--checkpoint", str(tiny_run),
                                 "fine", b"caf\xe9"], capture_output=True, text=True, cwd=ROOT)
        clean_error(result, "argument 2 is not valid UTF-8", "0xe9")


def test_eval_without_sentences_is_a_clear_error(corpus, tiny_run, tmp_path):
    (tmp_path / "src").write_text("")
    (tmp_path / "ref").write_text("")
    clean_error(nmt("eval", "--checkpoint", str(tiny_run), "--src", str(tmp_path / "src"), "--ref",
                     str(tmp_path / "ref")), "src: empty")
    run = tmp_path / "no-test"
    args = TINY[:]
    args[args.index("--test-size") + 1] = "0"
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "1", *args)
    assert result.returncode == 0, result.stderr
    clean_error(nmt("eval", "--checkpoint", str(run)), "--test-size 0", "--src and --ref")


def test_a_tiny_vocabulary_is_raised_to_what_the_characters_need(corpus, tmp_path):
    args = [a if a != "60" else "16" for a in TINY]
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(tmp_path / "r"), "--max-steps", "1", *args)
    assert result.returncode == 0, result.stderr
    assert "--vocab-size 16: below the" in " ".join(result.stderr.split())


@pytest.mark.parametrize("args, message", [
    (["translate", "--checkpoint", "{run}", "hi", "--beam", "40"], "beam size 40 is too large"),
    (["translate", "--checkpoint", "{run}", "hi", "--beam", "2", "--length-penalty", "nan"], "--length-penalty"),
    (["eval", "--checkpoint", "{run}", "--beam", "2", "--length-penalty", "inf", "--json"], "--length-penalty"),
    (["eval", "--checkpoint", "{run}", "--hyp-out", "{tmp}"], "--hyp-out {tmp}: is a directory"),
    (["train", "--corpus", "{corpus}", "--run-dir", "{tmp}/r", "--valid-bleu-size", "0"], "--valid-bleu-size 0: must be >= 1"),
    (["train", "--corpus", "{corpus}", "--run-dir", "{tmp}/r", "--valid-src", "{corpus}"], "--valid-src and --valid-tgt"),
])
def test_more_mistakes_give_one_clear_line(tiny_run, corpus, tmp_path, args, message):
    fill = {"run": tiny_run, "tmp": tmp_path, "corpus": corpus}
    clean_error(nmt(*[a.format(**fill) for a in args]), message.format(**fill))
    assert not (tmp_path / "r").exists()


def test_one_thread_is_not_threads(corpus, tmp_path):
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(tmp_path / "r"), "--max-steps", "1",
                 "--threads", "1", *TINY)
    assert result.returncode == 0 and "cpu (1 thread," in " ".join(result.stderr.split())


# --- what a new user expects ----------------------------------------------------------------

def test_given_validation_and_test_sets_replace_the_carved_ones(corpus, tmp_path):
    pairs = make_pairs(12, seed=21)
    for part, chunk in (("valid", pairs[:5]), ("test", pairs[5:])):
        (tmp_path / f"{part}.en").write_text("".join(s + "\n" for s, _ in chunk))
        (tmp_path / f"{part}.fr").write_text("".join(t + "\n" for _, t in chunk))
    run = tmp_path / "run"
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "2", *TINY,
                 "--valid-src", str(tmp_path / "valid.en"), "--valid-tgt", str(tmp_path / "valid.fr"),
                 "--test-src", str(tmp_path / "test.en"), "--test-tgt", str(tmp_path / "test.fr"))
    assert result.returncode == 0, result.stderr
    assert (run / "valid.tsv").read_text() == "".join(f"{s}\t{t}\n" for s, t in pairs[:5])
    assert (run / "test.tsv").read_text() == "".join(f"{s}\t{t}\n" for s, t in pairs[5:])
    clean_error(nmt("eval", "--checkpoint", str(run), "--hyp-out", str(tmp_path / "test.fr")),
                 "is the run's test_tgt file")
    scored = json.loads(nmt("eval", "--checkpoint", str(run), "--json").stdout)
    assert scored["sentences"] == 7 and scored["test_set"].startswith(str(tmp_path / "test.en"))
    card = json.loads(nmt("info", "--checkpoint", str(run), "--json").stdout)
    assert card["validation set"].startswith(f"5 pairs from {tmp_path / 'valid.en'} + {tmp_path / 'valid.fr'}")
    assert card["test set"].startswith("7 pairs from")
    pairs = json.loads((run / "run.json").read_text())["pairs"]
    assert pairs["train"] + pairs["dropped_long"] == 300  # nothing carved out of the corpus
    resumed = nmt("train", "--resume", str(run), "--max-steps", "3")
    assert resumed.returncode == 0, resumed.stderr
