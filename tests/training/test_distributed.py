"""Training on several processes: two CPU ranks (gloo) started by torchrun and by
``nmt train --nproc 2``. Each real launch costs about ten seconds on 2 cores, so the
decisions the ranks must agree on are also tested in one process, with a simulated peer."""
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
import torch
from conftest import ROOT, TINY, nmt
from safetensors.torch import load_file
from conftest import tiny_config

from nmt.training.distributed import Processes
from nmt.training.launch import without_flag

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers

# 8 sentences a batch: 4 a rank; no dropout, so one rank and two see the same computation
ARGS = [*[a if a != "4" else "8" for a in TINY], "--dropout", "0"]


def torchrun(*args, nproc=2, **kwargs):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nproc}", "-m", "nmt", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, **kwargs)


def _weights(run):
    return {k: v for k, v in load_file(run / "last.safetensors").items() if k.startswith("model.")}


def test_two_ranks_train_the_same_weights_as_one(tmp_path, corpus):
    args = ["train", "--corpus", corpus, "--max-steps", "10", *ARGS]
    one = nmt(*args, "--run-dir", tmp_path / "one")
    two = torchrun(*args, "--run-dir", tmp_path / "two")
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, worst  # equal up to the order of float sums
    assert two.stderr.count("run saved in") == 1  # rank 0 alone reports


def test_early_stopping_stops_every_rank_at_the_same_step(tmp_path, corpus):
    # validation BLEU stays 0 on this tiny model, so patience 1 ends the run at the second one
    result = torchrun("train", "--corpus", corpus, "--run-dir", tmp_path / "run", "--max-steps", "100",
                      "--valid-every", "3", "--patience", "1", *ARGS)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())  # however the terminal wrapped it
    assert "early stopping" in said and "6 steps" in said


def test_the_time_budget_stops_both_ranks(tmp_path, corpus):
    result = torchrun("train", "--corpus", corpus, "--run-dir", tmp_path / "run", "--max-steps", "100000",
                      "--epochs", "1000", "--max-minutes", "0.02", *ARGS)
    assert result.returncode == 0 and "run saved in" in result.stderr, result.stderr
    assert load_file(tmp_path / "run" / "last.safetensors")


def test_nproc_trains_and_resumes_on_another_number_of_ranks(tmp_path, corpus):
    run = tmp_path / "run"
    first = nmt("train", "--nproc", "2", "--corpus", corpus, "--run-dir", run, "--max-steps", "6",
                "--valid-every", "3", *ARGS, process=True)
    assert first.returncode == 0, first.stderr
    assert f"runsavedin{run}:6steps" in "".join(first.stderr.split())  # however the terminal wraps it
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2  # one writer
    alone = nmt("train", "--resume", run, "--max-steps", "9")
    assert alone.returncode == 0, alone.stderr
    again = nmt("train", "--nproc", "2", "--resume", run, "--max-steps", "12", process=True)
    assert again.returncode == 0, again.stderr
    assert "12steps" in "".join(again.stderr.split())
    assert [r["step"] for r in _records(run)] == [3, 6, 9, 12]


def test_every_rank_reads_prepared_data(tmp_path, corpus):
    data = tmp_path / "data"
    sizes = ["--vocab-size", "60", "--valid-size", "5", "--test-size", "5"]
    assert nmt("prepare", "--corpus", corpus, *sizes, "-o", data).returncode == 0
    args = [a for a in ARGS if a not in sizes]
    result = torchrun("train", "--data", data, "--run-dir", tmp_path / "run", "--max-steps", "4", *args)
    assert result.returncode == 0 and "run saved in" in result.stderr, result.stderr


def _records(run):
    import json
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _start(tmp_path, corpus):
    """A long 2-rank run; returns the launcher once the run has saved a checkpoint."""
    run = tmp_path / "run"
    launcher = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "train", "--nproc", "2", "--corpus",
                                 str(corpus), "--run-dir", str(run), "--max-steps", "100000", "--epochs", "1000",
                                 "--valid-every", "5", *ARGS], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (run / "last.safetensors").exists():
        assert launcher.poll() is None, launcher.communicate()[1]
        assert time.monotonic() < deadline, "no checkpoint within 2 minutes"
        time.sleep(0.2)
    return launcher, run


def _workers(launcher):
    """The launcher's worker processes: {rank: pid}."""
    ranks = {}
    for pid in _pids():
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in environ if b"=" in item)
        if env.get(b"TORCHELASTIC_RUN_ID") and int(_ppid(pid)) == launcher.pid:
            ranks[int(env[b"RANK"])] = pid
    return ranks


def _pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[1]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_stop_signal_to_the_launcher_saves_once_and_leaves_no_process(tmp_path, corpus, sig, status):
    from nmt.training.state import read_metrics
    launcher, run = _start(tmp_path, corpus)
    workers = _workers(launcher)
    assert sorted(workers) == [0, 1]
    if sig == signal.SIGINT:
        os.killpg(launcher.pid, sig)  # Ctrl-C in a terminal: the whole foreground group
    else:
        launcher.send_signal(sig)
    _, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == status, stderr
    assert f"stopping: {signal.Signals(sig).name} received" in stderr
    assert not [pid for pid in workers.values() if os.path.exists(f"/proc/{pid}")]
    saved = load_file(run / "last.safetensors")
    assert saved  # complete, readable
    step = nmt("info", "--checkpoint", run, "--json")
    assert step.returncode == 0
    assert read_metrics(run / "metrics.jsonl")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_kill_9_of_one_worker_stops_the_others_with_a_clear_error(tmp_path, corpus):
    launcher, run = _start(tmp_path, corpus)
    workers = _workers(launcher)
    os.kill(workers[1], signal.SIGKILL)
    killed = time.monotonic()
    _, stderr = launcher.communicate(timeout=60)
    assert time.monotonic() - killed < 30
    assert launcher.returncode == 1
    assert "error: training process rank 1" in stderr and "was killed by SIGKILL" in stderr
    assert not os.path.exists(f"/proc/{workers[0]}")
    assert nmt("translate", "--checkpoint", run, "Tom sees the cat.").returncode == 0  # intact
    resumed = nmt("train", "--resume", run, "--max-steps", "30", "--epochs", "1000")
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_kill_9_of_the_launcher_stops_its_workers_and_the_run_resumes(tmp_path, corpus):
    launcher, run = _start(tmp_path, corpus)
    workers = _workers(launcher)
    assert sorted(workers) == [0, 1]
    os.kill(launcher.pid, signal.SIGKILL)
    killed = time.monotonic()
    while [pid for pid in workers.values() if _alive(pid)]:
        assert time.monotonic() - killed < 20, "the workers outlived their launcher"
        time.sleep(0.1)
    launcher.wait()
    stderr = launcher.stderr.read()  # the workers' too: they wrote to the launcher's pipe
    assert "the launcher" in stderr and "is gone" in stderr and "Traceback" not in stderr, stderr
    resumed = nmt("train", "--resume", run, "--max-steps", "40", "--epochs", "1000")
    assert resumed.returncode == 0, resumed.stderr  # saved, and the lock is free


def _alive(pid):
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by init, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_more_processes_than_cores_are_refused_unless_asked_for(tmp_path, corpus):
    from nmt.runtime.devices import available_cores
    many = str(available_cores() + 1)
    refused = nmt("train", "--corpus", corpus, "--run-dir", tmp_path / "run", "--nproc", many, *ARGS)
    assert refused.returncode == 1 and not (tmp_path / "run").exists()
    assert refused.stderr.startswith(f"error: --nproc {many}: this machine gives nmt") and "--oversubscribe" in refused.stderr
    from nmt.training.launch import check_process_count
    check_process_count(int(many), "cpu", oversubscribe=True)  # asked for: no refusal


@dataclass(frozen=True)
class _WithPeer(Processes):
    """Rank 0 of two, with the other rank simulated: its figures are added in every sum."""

    peer: tuple = (0.0, 0.0, 0.0)

    def sum(self, values):
        return [v + p for v, p in zip(values, self.peer + (0.0,) * len(values))]

    def gather(self, value):
        return [value, value]

    def replicate(self, model):
        return model


@pytest.mark.parametrize("peer, reason, steps", [((float("nan"), 0.0, 0.0), "non-finite loss", 0),
                                                 ((0.0, float(signal.SIGTERM), 0.0), "a stop signal to another process", 1)])
def test_what_another_rank_reports_stops_this_one(tmp_path, corpus_file, peer, reason, steps):
    from nmt.data.prepare import prepare_run_data
    from nmt.data.tokenizer import PAD_ID
    from nmt.models.build import build_model
    from nmt.training.callbacks import TrainCallbacks
    from nmt.training.trainer import Trainer

    config = tiny_config(corpus_file, max_steps=5, dropout=0.0)
    data = prepare_run_data(config.data, tmp_path)
    config = data.sized(config.for_corpus(len(data.train_src)))  # as nmt train resolves it
    torch.manual_seed(0)
    model = build_model(config.model, PAD_ID, data.source_pieces, data.target_pieces)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(config, model, data, torch.device("cpu"), TrainCallbacks(),
                      processes=_WithPeer(rank=0, world=2, peer=peer))
    state = trainer.run()
    assert state.step == steps and reason in trainer.stop_reason
    changed = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert changed == bool(steps)  # a non-finite loss anywhere takes no step anywhere


def test_the_nproc_flag_is_taken_out_of_the_workers_command():
    assert without_flag(["train", "--nproc", "2", "--lr", "1"], "--nproc") == ["train", "--lr", "1"]
    assert without_flag(["train", "--nproc=2", "--nprocs"], "--nproc") == ["train", "--nprocs"]


def test_accumulating_two_batches_is_one_step_on_both(tmp_path, corpus_file):
    from nmt.data.prepare import prepare_run_data
    from nmt.data.tokenizer import PAD_ID
    from nmt.models.build import build_model
    from nmt.training.callbacks import TrainCallbacks
    from nmt.training.trainer import Trainer

    config = tiny_config(corpus_file, dropout=0.0, accum=2)
    data = prepare_run_data(config.data, tmp_path)
    config = data.sized(config.for_corpus(len(data.train_src)))  # as nmt train resolves it

    def trainer():
        torch.manual_seed(0)
        model = build_model(config.model, PAD_ID, data.source_pieces, data.target_pieces)
        return Trainer(config, model, data, torch.device("cpu"), TrainCallbacks())

    split, joined = trainer(), trainer()
    first, second = split.batches_of_epoch(0)[:2]
    assert split.train_step([first, second]) == pytest.approx(joined.train_step([first + second]), rel=1e-6)
    for (name, a), b in zip(split.model.state_dict().items(), joined.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    state = trainer().run()  # 12 steps of 2 batches each
    batches = len(split.batches_of_epoch(0))
    assert state.step == 12 and state.epoch * batches + state.batch_in_epoch >= 23


def test_on_cuda_each_process_needs_a_gpu(monkeypatch):
    from nmt.errors import SettingError
    from nmt.training.launch import check_process_count
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_process_count(2, "auto")
    with pytest.raises(SettingError, match="^nproc 3: only 2 CUDA device"):
        check_process_count(3, "cuda", oversubscribe=True)
    check_process_count(1, "cpu")  # --device cpu counts cores, whatever GPUs there are
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SettingError, match="^device cuda: CUDA is not available"):
        check_process_count(2, "cuda")
