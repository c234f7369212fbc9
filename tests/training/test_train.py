import json

import torch
from safetensors.torch import load_file

from conftest import tiny_config
from nmt.config import read_run_config
from nmt.training.runs import train_new_run


def test_same_seed_same_data_gives_the_same_model(tmp_path, corpus_file):
    train_new_run(tiny_config(corpus_file), tmp_path / "a")
    train_new_run(tiny_config(corpus_file), tmp_path / "b")
    a, b = load_file(tmp_path / "a" / "last.safetensors"), load_file(tmp_path / "b" / "last.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a if not k.startswith("rng"))
    train_new_run(tiny_config(corpus_file, seed=2), tmp_path / "c")
    c = load_file(tmp_path / "c" / "last.safetensors")
    assert not torch.equal(a["model.generator.proj.weight"], c["model.generator.proj.weight"])


def test_run_directory_holds_everything_a_run_needs(tmp_path, corpus_file):
    state = train_new_run(tiny_config(corpus_file), tmp_path / "run")
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.yaml", "spm.model", "valid.tsv", "test.tsv", "best.safetensors",
            "last.safetensors", "metrics.jsonl", "run.json"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    assert state.step == 12
    config = read_run_config(tmp_path / "run" / "config.yaml")
    assert config.model.hidden_size == 12 and config.model.vocab > 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [6, 12]
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["steps"] == 12 and summary["pairs"]["test"] > 0


def test_held_out_sources_never_occur_in_training(tmp_path, corpus_file):
    train_new_run(tiny_config(corpus_file, max_steps=1), tmp_path / "run")
    held = {line.split("\t")[0] for name in ("valid.tsv", "test.tsv")
            for line in (tmp_path / "run" / name).read_text().splitlines()}
    train = {line.split("\t")[0] for line in corpus_file.read_text().splitlines()} - held
    assert held and train and not held & train


def test_interrupted_and_resumed_run_equals_an_uninterrupted_one(tmp_path, corpus_file):
    from nmt.training.runs import resume_run
    full = tiny_config(corpus_file, max_steps=14, valid_every=4, dropout=0.3, lr_decay=0.5)
    train_new_run(full, tmp_path / "full")
    train_new_run(full.replace(max_steps=6), tmp_path / "part")
    resume_run(tmp_path / "part", {"max_steps": 14})
    a = load_file(tmp_path / "full" / "last.safetensors")
    b = load_file(tmp_path / "part" / "last.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_resume_may_take_another_thread_count(tmp_path, corpus_file):
    """--threads on a resume (another machine's cores): the run goes on to its budget and
    config.yaml records the threads it last used. Its sums may round otherwise, so it is not
    the bit-exact continuation that a resume on the same threads is."""
    from nmt.training.runs import resume_run
    train_new_run(tiny_config(corpus_file, max_steps=4, threads=2), tmp_path / "run")
    assert resume_run(tmp_path / "run", {"max_steps": 8, "threads": 1}).step == 8
    assert "threads: 1" in (tmp_path / "run" / "config.yaml").read_text()


def test_non_finite_loss_stops_without_touching_the_weights(tmp_path, corpus_file):
    from nmt.inference import loading
    from nmt.runtime import checkpoint
    from nmt.training.runs import resume_run
    train_new_run(tiny_config(corpus_file, max_steps=4), tmp_path / "run")
    before = load_file(tmp_path / "run" / "last.safetensors")
    path = tmp_path / "run" / "last.safetensors"
    tensors, meta = checkpoint.read(path, loading.skeleton(read_run_config(path.parent / "config.yaml").model),
                                    training=True)
    tensors["model.generator.proj.weight"][:] = 3e38  # finite weights whose logits overflow
    from safetensors.torch import save_file
    save_file(tensors, str(tmp_path / "run" / "last.safetensors"), metadata=meta)
    state = resume_run(tmp_path / "run", {"max_steps": 8})
    assert state.step == 4
    after = load_file(tmp_path / "run" / "last.safetensors")
    assert torch.equal(before["model.encoder.rnn.weight_hh_l0"], after["model.encoder.rnn.weight_hh_l0"])
    assert (tmp_path / "run" / "best.safetensors").exists()


def test_patience_stops_when_bleu_stalls(tmp_path, corpus_file):
    # lr so small that BLEU stays at its first value: the second validation is already stale
    state = train_new_run(tiny_config(corpus_file, max_steps=40, valid_every=2, patience=1, lr=1e-9),
                          tmp_path / "run")
    assert state.step == 4


def test_with_no_budget_given_a_run_trains_until_validation_stalls(tmp_path, corpus_file):
    # the default budget: patience 3, so the first validation and three stale ones
    config = tiny_config(corpus_file, max_steps=None, valid_every=2, lr=1e-9)
    assert config.train.default_budget and config.train.patience_limit == 3
    state = train_new_run(config, tmp_path / "run")
    assert state.step == 8
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["stopped_by"].startswith("early stopping") and "until validation BLEU" in summary["budget"]


def test_a_budget_given_turns_the_default_patience_off(tmp_path, corpus_file):
    config = tiny_config(corpus_file, max_steps=12, valid_every=2, lr=1e-9)
    assert config.train.patience_limit == 0 and config.train.budget_text() == "12 steps"
    assert train_new_run(config, tmp_path / "run").step == 12
    assert json.loads((tmp_path / "run" / "run.json").read_text())["stopped_by"] == "the budget"


def _last_weights(run):
    return {k: v for k, v in load_file(run / "last.safetensors").items()}


def _assert_same_last(a, b):
    wa, wb = _last_weights(a), _last_weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def test_a_stop_signal_during_a_step_still_resumes_exactly(tmp_path, corpus_file, monkeypatch):
    from nmt.training.runs import resume_run
    from nmt.training.trainer import Trainer
    full = tiny_config(corpus_file, max_steps=10, valid_every=4, dropout=0.3)
    train_new_run(full, tmp_path / "full")
    real_step = Trainer.train_step

    def interrupted(self, batch):
        value = real_step(self, batch)
        if self.state.step == 5:  # the signal arrives while the sixth step runs
            self.stop_reason = "SIGINT received"
        return value

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    assert train_new_run(full, tmp_path / "part").step == 6
    monkeypatch.undo()
    resume_run(tmp_path / "part", {})
    _assert_same_last(tmp_path / "full", tmp_path / "part")


def test_a_budget_ending_on_an_epoch_boundary_resumes_exactly(tmp_path, corpus_file):
    from nmt.training.runs import resume_run
    full = tiny_config(corpus_file, max_steps=None, epochs=3, valid_every=0, lr_decay=0.5)
    steps_per_epoch = train_new_run(full, tmp_path / "full").step // 3
    part = full.replace(max_steps=steps_per_epoch)
    assert train_new_run(part, tmp_path / "part").epoch == 1
    state = resume_run(tmp_path / "part", {"max_steps": None})
    assert state.step == 3 * steps_per_epoch
    _assert_same_last(tmp_path / "full", tmp_path / "part")


def test_resume_refuses_a_changed_corpus_and_works_from_elsewhere(tmp_path, corpus_file, monkeypatch):
    import pytest

    from nmt.errors import NmtError
    from nmt.training.runs import resume_run
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text(corpus_file.read_text())
    monkeypatch.chdir(tmp_path)
    train_new_run(tiny_config("corpus.tsv", max_steps=2), tmp_path / "run")  # a relative path
    monkeypatch.chdir("/")
    assert resume_run(tmp_path / "run", {"max_steps": 3}).step == 3
    held = (tmp_path / "run" / "test.tsv").read_text().splitlines()[0]
    corpus.write_text(corpus.read_text().replace(held + "\n", ""))
    with pytest.raises(NmtError, match="not the data this run started with"):
        resume_run(tmp_path / "run", {"max_steps": 4})


def test_a_non_finite_gradient_takes_no_step_and_stops(tmp_path, corpus_file, monkeypatch, caplog):
    import logging
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: torch.tensor(float("inf")))
    with caplog.at_level(logging.WARNING):
        state = train_new_run(tiny_config(corpus_file, max_steps=5), tmp_path / "run")
    assert state.step == 0 and "non-finite gradient" in caplog.text
    first = load_file(tmp_path / "run" / "last.safetensors")
    monkeypatch.undo()
    train_new_run(tiny_config(corpus_file, max_steps=1), tmp_path / "ref")  # the same seed's first step
    assert not torch.equal(first["model.generator.proj.weight"],
                           load_file(tmp_path / "ref" / "last.safetensors")["model.generator.proj.weight"])


def test_the_heap_is_handed_back_every_few_steps(tmp_path, corpus_file, monkeypatch):
    from nmt.training import trainer
    released = []
    monkeypatch.setattr(trainer, "RELEASE_EVERY", 5)
    monkeypatch.setattr(trainer, "release_freed_memory", lambda: released.append(1))
    train_new_run(tiny_config(corpus_file), tmp_path / "run")
    assert len(released) == 1 + 12 // 5  # once the data is prepared, then at steps 5 and 10


def test_a_batch_run_in_several_passes_takes_the_same_step(tmp_path, corpus_file, monkeypatch):
    from nmt.training.trainer import Trainer
    whole = tiny_config(corpus_file, max_steps=3, valid_every=3, dropout=0.0)
    train_new_run(whole, tmp_path / "whole")
    passes, backward = [], Trainer._backward
    monkeypatch.setattr(Trainer, "_backward", lambda self, sides, weight: passes.append(sides[0]) or
                        backward(self, sides, weight))
    train_new_run(whole.replace(max_pass_pieces=60), tmp_path / "passes")
    assert len(passes) > 3 and all(len(p) * 4 <= 60 or len(p) == 1 for p in passes)
    a, b = _last_weights(tmp_path / "whole"), _last_weights(tmp_path / "passes")
    for key in (k for k in a if k.startswith("model.")):
        assert torch.allclose(a[key], b[key], atol=1e-5), key
