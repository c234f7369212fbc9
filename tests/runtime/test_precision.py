"""--precision: the CPU's native bfloat16 detected from its flags, what each setting means on
each device, and bf16 training and decoding that run and stay close to float32."""
import logging

import pytest
import torch
from conftest import TINY, nmt
from conftest import tiny_config

from nmt.errors import NmtError
from nmt.runtime import precision
from nmt.runtime.precision import autocast, cpu_bf16_flags, resolve

CPU = torch.device("cpu")
FLAGS = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f {extra}\nbogomips\t: 4000\n"


@pytest.mark.parametrize("extra, native", [("", ()), ("avx512_bf16", ("avx512_bf16",)),
                                           ("amx_bf16 avx512_bf16", ("avx512_bf16", "amx_bf16")),
                                           ("avx512_bf16x", ())])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, extra, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(FLAGS.format(extra=extra))
    assert cpu_bf16_flags(cpuinfo) == native
    assert cpu_bf16_flags(tmp_path / "missing") == ()


@pytest.mark.parametrize("native, auto", [(("avx512_bf16",), "bf16"), ((), "fp32")])
def test_auto_on_cpu_is_bf16_only_where_the_cpu_computes_it(monkeypatch, caplog, native, auto):
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: native)
    precision._warn_emulated.cache_clear()
    assert resolve("auto", CPU, "transformer") == auto
    assert resolve("auto", CPU, "gru") == "fp32"  # measured: bf16 bought the GRU little, for BLEU
    assert resolve("fp32", CPU) == "fp32"
    with caplog.at_level(logging.WARNING):
        assert resolve("bf16", CPU) == "bf16"  # asked for: it runs, emulated where not native
    assert ("runs emulated" in caplog.text) == (not native)


def test_settings_a_device_cannot_run_are_clear_errors():
    with pytest.raises(NmtError, match="^precision fp16: float16 autocast runs on CUDA only"):
        resolve("fp16", CPU)
    with pytest.raises(NmtError, match="^precision fp8: use auto, fp32, bf16, fp16"):
        resolve("fp8", CPU)
    with pytest.raises(NmtError, match="^precision bf16: mixed precision runs on CUDA or CPU, not mps"):
        resolve("bf16", torch.device("mps"))
    assert resolve("auto", torch.device("mps")) == "fp32"


def test_autocast_runs_matmuls_in_bf16_and_nothing_in_fp32():
    a = torch.randn(4, 4)
    with autocast(CPU, "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with autocast(CPU, "fp32"):
        assert (a @ a).dtype == torch.float32
    with autocast(CPU, "int8"):  # int8 weights are their own precision: no autocast on top
        assert (a @ a).dtype == torch.float32


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_bf16_training_stays_close_to_fp32_and_resumes_exactly(tmp_path, corpus_file, arch):
    from safetensors.torch import load_file

    from nmt.training.runs import resume_run, train_new_run
    sizes = {"arch": arch, "embed_size": 12, "hidden_size": 12, "heads": 2, "ff_size": 16, "dropout": 0.0,
             "schedule": "plateau", "lr": 5e-3}
    losses, weights = {}, {}
    for name, steps in (("fp32", 1), ("fp32", 8), ("bf16", 8)):
        run = tmp_path / f"{name}-{steps}"
        train_new_run(tiny_config(corpus_file, precision=name, max_steps=steps, valid_every=4, **sizes), run)
        losses[name] = [r["valid_loss"] for r in _records(run)]
        weights[name, steps] = torch.cat([v.flatten() for k, v in sorted(load_file(run / "last.safetensors").items())
                                          if k.startswith("model.")])
    moved = (weights["fp32", 8] - weights["fp32", 1]).norm()  # what steps 2-8 did
    gap = (weights["bf16", 8] - weights["fp32", 8]).norm()
    assert 0 < gap < 0.25 * moved  # another precision really ran, and stayed close (measured: 0.02, 0.08)
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    assert losses["bf16"][1] < losses["bf16"][0]  # and learned
    train_new_run(tiny_config(corpus_file, precision="bf16", max_steps=4, valid_every=4, **sizes), tmp_path / "part")
    resume_run(tmp_path / "part", {"max_steps": 8})
    a, b = load_file(tmp_path / "bf16-8" / "last.safetensors"), load_file(tmp_path / "part" / "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def _records(run):
    import json
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_translate_and_eval_take_a_precision_and_report_it(tiny_run):
    fp32 = nmt("translate", "--checkpoint", str(tiny_run), "--precision", "fp32", "Tom sees the cat.")
    bf16 = nmt("translate", "--checkpoint", str(tiny_run), "--precision", "bf16", "Tom sees the cat.")
    assert fp32.returncode == bf16.returncode == 0, bf16.stderr
    assert len(bf16.stdout.splitlines()) == 1
    scored = nmt("eval", "--checkpoint", str(tiny_run), "--precision", "bf16", "--json")
    assert scored.returncode == 0 and '"precision": "bf16"' in scored.stdout
    refused = nmt("translate", "--checkpoint", str(tiny_run), "--precision", "fp16", "--device", "cpu", "x")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: --precision fp16: float16 autocast runs on CUDA only")


def test_train_refuses_fp16_on_cpu_before_preparing_anything(tmp_path, corpus):
    args = [a for a in TINY if a not in ("--precision", "fp32")]
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(tmp_path / "r"), *args, "--precision", "fp16")
    assert result.returncode == 1 and "--precision fp16: float16 autocast runs on CUDA only" in result.stderr
    assert not (tmp_path / "r").exists()
