"""Subword sampling: training batches get sampled segmentations of the pairs' own text, drawn
the same for a step in any process; validation and translation always take the best
segmentation, so a run's translations do not depend on it."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import ROOT, tiny_config
from nmt.config import build_config
from nmt.data.prepare import open_run_data
from nmt.data.segmentation import TrainingPairs
from nmt.errors import SettingError
from nmt.training.runs import resume_run, train_new_run


def _config(corpus, **extra):
    return tiny_config(corpus, **{"max_steps": 8, "valid_every": 4, "average_last": 0, **extra})


@pytest.fixture(scope="module")
def sampled_run(corpus_file, tmp_path_factory):
    run = tmp_path_factory.mktemp("sampled") / "run"
    train_new_run(_config(corpus_file, subword_alpha=0.2), run)
    return run


def test_prepared_data_holds_each_training_pairs_text(sampled_run):
    data = open_run_data(sampled_run)
    src_text, tgt_text = data.train_text
    assert len(src_text) == len(data.train_src) > 100
    for i in range(0, len(src_text), 37):
        assert data.tokenizer.encode([src_text[i], tgt_text[i]]) == [data.train_src[i], data.train_tgt[i]]


def test_sampled_segmentations_are_of_the_same_text_and_seeded_by_the_step(sampled_run):
    data = open_run_data(sampled_run)
    index = list(range(64))
    best = TrainingPairs(data).draw(index, step=1)
    pairs = TrainingPairs(data, alpha=0.05, seed=1, max_pieces=64)
    first, again, later = pairs.draw(index, 1), pairs.draw(index, 1), pairs.draw(index, 2)
    assert first == again and first != later and first != best
    for sampled, stored in zip(first, best):  # each side: another segmentation of the same text
        assert any(s != b for s, b in zip(sampled, stored))
        assert data.tokenizer.decode(sampled) == data.tokenizer.decode(stored)
        assert max(map(max, sampled)) < data.tokenizer.vocab_size
    short = TrainingPairs(data, alpha=0.05, seed=1, max_pieces=8).draw(index, 1)
    assert all(len(s) <= 8 or s == b for side, stored in zip(short, best) for s, b in zip(side, stored))


def test_only_training_batches_are_sampled_and_translations_do_not_depend_on_it(sampled_run, corpus_file,
                                                                                 tmp_path, monkeypatch):
    from nmt.api import load
    from nmt.training import trainer as trainer_module

    config = yaml.safe_load((sampled_run / "config.yaml").read_text())
    assert config["train"]["subword_alpha"] == 0.2
    # every piece has a row on both sides: a sampled one never becomes <unk>
    assert config["model"]["source_pieces"] == config["model"]["target_pieces"] == config["model"]["vocab"]
    model = load(sampled_run, "cpu", "fp32")
    sources = ["Tom sees the cat.", "Mary likes the bird."]
    outputs = model.translate(sources, beam=2)
    assert [t.pieces for t in outputs[0]] == [t.pieces for t in model.translate(sources, beam=2)[0]]
    assert list(outputs[0][0].source_pieces) == model.translator().tokenizer.pieces(
        model.translator().tokenizer.encode([sources[0]])[0])
    copy = tmp_path / "copy"
    shutil.copytree(sampled_run, copy)
    config["train"]["subword_alpha"] = 0.0
    (copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert [[t.text for t in n] for n in load(copy, "cpu", "fp32").translate(sources, beam=2)] == \
        [[t.text for t in n] for n in outputs]
    # in training, the validation sources are the best segmentation; the batches are not
    seen = {}
    original = trainer_module.Trainer._draw

    def spy(self, group):
        seen.setdefault("valid", self.valid_src == self.data.tokenizer.encode([s for s, _ in self.valid]))
        drawn = original(self, group)
        stored = [self.data.train_src[i] for i in group[0]] == drawn[0][0]
        seen["stored"] = seen.get("stored", True) and stored  # every batch as stored?
        return drawn

    monkeypatch.setattr(trainer_module.Trainer, "_draw", spy)
    train_new_run(_config(corpus_file, subword_alpha=0.2, max_steps=6), tmp_path / "spied")
    assert seen == {"valid": True, "stored": False}


def test_a_sampled_run_resumes_exactly(corpus_file, tmp_path):
    config = _config(corpus_file, subword_alpha=0.2, max_steps=8)
    train_new_run(config, tmp_path / "whole")
    train_new_run(config.replace(max_steps=3), tmp_path / "part")
    resume_run(tmp_path / "part", {"max_steps": 8})
    a, b = (load_file(r / "last.safetensors") for r in (tmp_path / "whole", tmp_path / "part"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    plain = load_file(train_new_run(config.replace(subword_alpha=0.0), tmp_path / "plain") and
                      tmp_path / "plain" / "last.safetensors")
    assert not torch.equal(plain["model.generator.proj.weight"][:4], a["model.generator.proj.weight"][:4])


def test_sampling_draws_the_same_segmentations_in_another_process(sampled_run):
    """SentencePiece's own sampler failed this: another process, another draw for one seed."""
    script = (f"import json, pathlib; from nmt.data.prepare import open_run_data; from nmt.data.segmentation "
              f"import TrainingPairs; data = open_run_data(pathlib.Path({str(sampled_run)!r})); "
              f"print(json.dumps(TrainingPairs(data, alpha=0.2, seed=3).draw(list(range(40)), 5)))")
    drawn = [json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                       text=True, cwd=ROOT).stdout) for _ in range(2)]
    here = TrainingPairs(open_run_data(sampled_run), alpha=0.2, seed=3).draw(list(range(40)), 5)
    assert drawn[0] == drawn[1] == [list(side) for side in here]
    assert here != TrainingPairs(open_run_data(sampled_run), alpha=0.2, seed=4).draw(list(range(40)), 5)


def test_nbest_weights_follow_the_segmentations_probability(sampled_run):
    """At alpha 1 the draw follows P(segmentation) over the n best; near 0 it is almost uniform."""
    data = open_run_data(sampled_run)
    text = data.train_text[0][0]
    candidates = data.tokenizer.sp.nbest_encode_as_ids(text, nbest_size=4)
    assert len(candidates) == 4 and candidates[0] == data.train_src[0]
    counts = {}
    for alpha in (1.0, 0.01):
        pairs = TrainingPairs(data, alpha=alpha, nbest=4)
        draws = [pairs._sample([text], np.random.default_rng(k))[0] for k in range(400)]
        counts[alpha] = [draws.count(c) for c in candidates]
    assert counts[1.0][0] > max(counts[1.0][1:]) and sum(counts[1.0]) == 400
    assert min(counts[0.01]) > 60  # about 100 each


def test_data_without_the_training_text_is_refused_for_sampling(corpus_file, tmp_path):
    from nmt.data.prepare import prepare_data_dir

    data = tmp_path / "data"
    prepare_data_dir(_config(corpus_file).data, data)
    for part in ("ids", "offsets", "lengths"):  # as an nmt before subword sampling prepared it
        for side in ("src", "tgt"):
            (data / f"train.{side}.text.{part}.npy").unlink()
    assert open_run_data(data).train_text is None
    config = build_config({}, {"data": str(data), "max_steps": 1, "embed_size": 8, "hidden_size": 12,
                               "layers": 1, "device": "cpu", "subword_alpha": 0.1})
    with pytest.raises(SettingError, match="subword_alpha.*prepare it again"):
        train_new_run(config, tmp_path / "run")
    assert np.isfinite(train_new_run(config.replace(subword_alpha=0.0), tmp_path / "plain").best_bleu)


def test_source_word_dropout_masks_training_sources_only_at_its_rate(sampled_run):
    from nmt.data.tokenizer import UNK_ID

    data = open_run_data(sampled_run)
    index = list(range(len(data.train_src)))
    best = TrainingPairs(data).draw(index, step=1)
    masked = TrainingPairs(data, seed=1, word_dropout=0.25).draw(index, step=1)
    assert masked == TrainingPairs(data, seed=1, word_dropout=0.25).draw(index, step=1)
    assert masked[1] == best[1]  # the targets as they are
    pieces = [(m, b) for ms, bs in zip(masked[0], best[0]) for m, b in zip(ms, bs)]
    assert all(m in (b, UNK_ID) for m, b in pieces) and [len(s) for s in masked[0]] == [len(s) for s in best[0]]
    assert sum(m != b for m, b in pieces) / len(pieces) == pytest.approx(0.25, abs=0.02)
    assert masked != TrainingPairs(data, seed=1, word_dropout=0.25).draw(index, step=2)


def test_sampling_from_the_whole_lattice_is_refused(sampled_run, corpus_file):
    """-1, as an older nmt's runs may record it, used SentencePiece's unreproducible sampler."""
    from nmt.training.runs import check_sampling

    config, data = _config(corpus_file, subword_alpha=0.2), open_run_data(sampled_run)
    check_sampling(config, data, None)
    with pytest.raises(SettingError, match="subword_nbest.*not reproducible"):
        check_sampling(config.replace(subword_nbest=-1), data, None)
    check_sampling(config.replace(subword_alpha=0.0, subword_nbest=-1), data, None)
