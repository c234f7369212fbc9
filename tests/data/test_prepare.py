"""Prepared data (nmt.data.prepare): the passes over a corpus, gzipped or not, the tokenizer's
bounded sample, data.json, and runs prepared before data.json existed."""
import gzip
import json
import logging
import re
from collections import Counter

import numpy as np
import torch
from conftest import TINY, clean_error, nmt, read_only, write_tsv
from conftest import tiny_config
from test_train import _assert_same_last

from nmt.config import DataConfig
from nmt.data.prepare import open_run_data, prepare_run_data
from nmt.training.runs import resume_run, train_new_run


def _prepare(tmp_path, name, **settings):
    directory = tmp_path / name
    directory.mkdir()
    return prepare_run_data(DataConfig(vocab_size=60, valid_size=10, test_size=10, **settings), directory)


def test_a_gzipped_corpus_prepares_as_its_text(tmp_path, corpus_file):
    packed = tmp_path / "toy.tsv.gz"  # named .gz, but the first bytes decide
    packed.write_bytes(gzip.compress(corpus_file.read_bytes()))
    plain, gz = _prepare(tmp_path, "plain", corpus=str(corpus_file)), _prepare(tmp_path, "gz", corpus=str(packed))
    assert plain.tokenizer.sha256 == gz.tokenizer.sha256 and (plain.valid, plain.test) == (gz.valid, gz.test)
    for side in ("src", "tgt"):
        a, b = getattr(plain, f"train_{side}"), getattr(gz, f"train_{side}")
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.offsets, b.offsets)
    assert gz.manifest.sources["corpus"]["sha256"] != plain.manifest.sources["corpus"]["sha256"]


def test_reverse_reads_the_corpus_the_other_way_round(tmp_path, corpus_file):
    """--reverse: the same pairs and pieces as the corpus with its columns swapped, recorded in
    data.json; --data then trains the reverse direction without the flag."""
    swapped = tmp_path / "swapped.tsv"
    swapped.write_text("".join("\t".join(line.split("\t")[:2][::-1]) + "\n"
                               for line in corpus_file.read_text().splitlines()))
    reverse, plain = _prepare(tmp_path, "reverse", corpus=str(corpus_file), reverse=True), \
        _prepare(tmp_path, "swapped", corpus=str(swapped))
    assert (reverse.valid, reverse.test) == (plain.valid, plain.test)
    french = {line.split("\t")[1] for line in corpus_file.read_text().splitlines()}
    assert all(src in french for src, _ in reverse.valid + reverse.test)
    for side in ("src", "tgt"):
        assert np.array_equal(getattr(reverse, f"train_{side}").ids, getattr(plain, f"train_{side}").ids)
    assert json.loads((tmp_path / "reverse" / "data.json").read_text())["settings"]["reverse"] is True
    result = nmt("train", "--data", tmp_path / "reverse", "--run-dir", tmp_path / "run", "--max-steps", "1",
                 "--embed-size", "8", "--hidden-size", "12", "--layers", "1", "--device", "cpu", "--precision", "fp32")
    assert result.returncode == 0, result.stderr
    assert "reverse: true" in (tmp_path / "run" / "config.yaml").read_text()


def test_a_tagged_corpus_has_its_tag_as_one_piece_before_each_source_and_none_held_out(tmp_path, corpus_file):
    """Tagged back-translation: a corpus's ``tag`` starts each of its sources as a piece of its
    own; its pairs are never held out; data.json records it; a tag with a space is refused."""
    lines = corpus_file.read_text().splitlines()
    synthetic = write_tsv(tmp_path / "synthetic.tsv", [tuple(line.split("\t")[:2]) for line in lines[:150]])
    real = write_tsv(tmp_path / "real.tsv", [tuple(line.split("\t")[:2]) for line in lines[150:]])
    data = _prepare(tmp_path, "tagged", corpus=[str(real), {"path": str(synthetic), "tag": "<bt>", "weight": 0.5}])
    tag = data.tokenizer.sp.piece_to_id("<bt>")
    assert tag > 3 and data.tokenizer.pieces(data.tokenizer.encode(["<bt> Tom."])[0])[:2] == ["▁", "<bt>"]
    assert not any("<bt>" in src for src, _ in data.valid + data.test)
    real_count, synthetic_count = (c["train"] for c in data.manifest.corpora)
    tagged = [tag in list(ids[:2]) for ids in data.train_src]
    assert tagged == [False] * real_count + [True] * synthetic_count
    assert data.manifest.corpora[1]["tag"] == "<bt>" and "tag" not in data.manifest.corpora[0]
    config = tmp_path / "bad.yaml"
    config.write_text(f"corpus:\n  - {real}\n  - {{path: {synthetic}, tag: '<b t>'}}\n")
    clean_error(nmt("prepare", "--config", config, "-o", tmp_path / "bad"), "tag must be one token")
    config.write_text(f"corpus:\n  - {real}\n  - {{path: {synthetic}, tag: </s>}}\n")
    clean_error(nmt("prepare", "--config", config, "-o", tmp_path / "bad"), "tag </s> is one of the tokenizer's own")


def test_a_tag_the_parent_cannot_keep_whole_is_refused_in_fine_tuning(tmp_path, tiny_run, corpus_file):
    """Fine-tuning copies the parent's tokenizer, which would cut a tag it was not trained with."""
    config = tmp_path / "tagged.yaml"
    config.write_text(f"corpus:\n  - {{path: {corpus_file}, tag: <bt>}}\n")
    clean_error(nmt("train", "--init-from", tiny_run, "--config", config, "--run-dir", tmp_path / "child",
                    "--max-steps", "1"), "corpus tag <bt>", "has no piece <bt>")


def test_data_json_says_what_was_prepared_and_from_what(tmp_path, corpus_file):
    lines = corpus_file.read_text().splitlines()
    corpus = tmp_path / "c.tsv"
    corpus.write_text("\n".join(lines[:50] + ["no tab here"] + lines[50:]) + "\n")
    data = _prepare(tmp_path, "data", corpus=str(corpus))
    record = json.loads((tmp_path / "data" / "data.json").read_text())
    assert record["sources"]["corpus"]["path"] == str(corpus) and record["sources"]["corpus"]["bytes"] > 0
    assert record["pairs"]["read"] == len(lines) and record["pairs"]["skipped"] == {"lines without a tab": 1}
    assert record["pairs"]["train"] == len(data.train_src) and record["pairs"]["valid"] == len(data.valid)
    assert record["tokenizer_sha256"] == data.tokenizer.sha256 and record["settings"]["vocab_size"] == 60
    again = open_run_data(tmp_path / "data")
    assert list(again.train_src) == list(data.train_src) and again.source_pieces == data.source_pieces


def test_the_tokenizer_trains_on_a_bounded_sample(tmp_path, corpus_file, caplog):
    with caplog.at_level(logging.INFO):
        data = _prepare(tmp_path, "small", corpus=str(corpus_file), spm_sample=100)
    assert "SentencePiece trains on 50 of the" in caplog.text
    full = _prepare(tmp_path, "full", corpus=str(corpus_file))
    assert data.tokenizer.sha256 != full.tokenizer.sha256 and len(data.train_src) == len(full.train_src)


def test_a_run_prepared_before_data_json_resumes_exactly(tmp_path, corpus_file):
    train_new_run(tiny_config(corpus_file, max_steps=12), tmp_path / "whole")
    train_new_run(tiny_config(corpus_file, max_steps=6), tmp_path / "old")
    for path in [tmp_path / "old" / "data.json", *(tmp_path / "old").glob("train.*.npy")]:
        path.unlink()  # as an nmt before prepared data left its runs
    assert resume_run(tmp_path / "old", {"max_steps": 12}).step == 12
    assert (tmp_path / "old" / "data.json").is_file()  # encoded once, from the same corpus
    _assert_same_last(tmp_path / "whole", tmp_path / "old")


# --- nmt prepare, and runs that share its data --------------------------------------------

def test_runs_share_prepared_data_read_only_and_refuse_it_changed(tmp_path, corpus):
    data = tmp_path / "data"
    made = nmt("prepare", "--corpus", corpus, "--vocab-size", "60", "--valid-size", "5", "--test-size", "5",
               "-o", data)
    assert made.returncode == 0 and "prepared" in made.stderr, made.stderr
    args = [a for a in TINY if a not in ("--vocab-size", "60", "--valid-size", "--test-size", "5")]
    with read_only(data):  # every run (and rank) only reads it
        for name in ("a", "b"):
            run = nmt("train", "--data", data, "--run-dir", tmp_path / name, "--max-steps", "2", *args)
            assert run.returncode == 0, run.stderr
    assert (tmp_path / "a" / "spm.model").read_bytes() == (data / "spm.model").read_bytes()
    assert not list((tmp_path / "a").glob("train.*.npy"))  # the pairs stay in the data
    scored = nmt("eval", "--checkpoint", tmp_path / "a", "--json")
    assert scored.returncode == 0, scored.stderr
    clean_error(nmt("train", "--data", data, "--vocab-size", "80", "--run-dir", tmp_path / "c", *args),
                f"--vocab-size 80: --data {data} was prepared with 60")
    record = json.loads((data / "data.json").read_text())
    record["pairs"]["skipped"] = {"edited": 1}
    (data / "data.json").write_text(json.dumps(record))
    clean_error(nmt("train", "--resume", tmp_path / "a", "--max-steps", "3"),
                f"--data {data}: not the data this run started with (its data.json changed)")


def test_prepared_held_out_sets_are_checked_against_data_json(tmp_path, corpus):
    """valid.tsv and test.tsv are checked like the rest of the data: by the size and SHA-256
    data.json records, or, in data prepared before the record, by its pair counts."""
    data = tmp_path / "data"
    assert nmt("prepare", "--corpus", corpus, "--vocab-size", "60", "--valid-size", "5", "--test-size", "5",
               "-o", data).returncode == 0
    open_run_data(data)
    test = (data / "test.tsv").read_text(encoding="utf-8")
    (data / "test.tsv").write_text(test.replace("\t", "\t ", 1), encoding="utf-8")  # a pair edited
    clean_error(nmt("train", "--data", data, "--run-dir", tmp_path / "r", "--max-steps", "1"),
                f"{data / 'test.tsv'}: not the held-out set data.json records", "prepare the data again")
    record = json.loads((data / "data.json").read_text())
    del record["held_out"]
    (data / "data.json").write_text(json.dumps(record))
    open_run_data(data)  # the same number of pairs: older data has no more to check
    (data / "test.tsv").write_text("".join(test.splitlines(True)[1:]), encoding="utf-8")  # a pair gone
    clean_error(nmt("train", "--data", data, "--run-dir", tmp_path / "r", "--max-steps", "1"),
                f"{data / 'test.tsv'}: not the held-out set")
    assert not (tmp_path / "r").exists()


def test_filters_that_drop_most_pairs_warn_and_under_a_tenth_refuse(tmp_path):
    long = [(f"{k} " + " ".join(["the red dog runs"] * 8), f"{k} " + " ".join(["le chien rouge court"] * 8))
            for k in range(200)]
    short = [(f"Tom sees {k}.", f"Tom voit {k}.") for k in range(300)]
    corpus = write_tsv(tmp_path / "c.tsv", short[:10] + long)  # 10 short, 200 long pairs
    result = nmt("prepare", "--corpus", corpus, "--max-pieces", "12", "--vocab-size", "60", "-o", tmp_path / "D")
    error = result.stderr.splitlines()[-1]  # after prepare's progress
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert error.startswith("error: ") and "keep 7 training pairs, 4.2%" in error and "under 10% is refused" in error
    assert not (tmp_path / "D").exists()
    corpus = write_tsv(tmp_path / "c.tsv", short[:200] + long)  # half of them long
    result = nmt("prepare", "--corpus", corpus, "--max-pieces", "12", "--vocab-size", "60", "-o", tmp_path / "D")
    assert result.returncode == 0, result.stderr
    assert re.search(r"WARNING.*the length filters keep [0-9,]+ training pairs, [0-9.]+% of them",
                     " ".join(result.stderr.split()))


def test_a_tiny_tokenizer_sample_is_blamed_for_unknown_pieces(tmp_path, corpus):
    result = nmt("prepare", "--corpus", corpus, "--spm-sample", "2", "--vocab-size", "100", "-o", tmp_path / "D")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "--vocab-size 100: SentencePiece trained on a sample (--spm-sample 2); raise it" in said
    assert re.search(r"--spm-sample 2: [0-9]+% of the training pieces are <unk>: SentencePiece trained on too few", said)
    result = nmt("prepare", "--corpus", corpus, "--vocab-size", "100", "-o", tmp_path / "E")
    assert result.returncode == 0 and "<unk>" not in result.stderr


def test_a_run_resumes_on_its_prepared_data_moved(tmp_path, corpus):
    """Prepared data that moved: the resume names where the run expects it and the way out,
    and --resume RUN --data NEWDIR continues on it when its data.json is the one recorded."""
    prepare = ["prepare", "--corpus", corpus, "--vocab-size", "60", "--valid-size", "5", "--test-size", "5"]
    assert nmt(*prepare, "-o", tmp_path / "data").returncode == 0
    assert nmt(*prepare, "--max-pieces", "20", "-o", tmp_path / "other").returncode == 0
    args = [a for a in TINY if a not in ("--vocab-size", "60", "--valid-size", "--test-size", "5")]
    run = tmp_path / "run"
    assert nmt("train", "--data", tmp_path / "data", "--run-dir", run, "--max-steps", "2", *args).returncode == 0
    (tmp_path / "data").rename(tmp_path / "moved")
    clean_error(nmt("train", "--resume", run, "--max-steps", "3"), f"{run} trains on the data prepared there, "
                "which is gone", f"nmt train --resume {run} --data NEWDIR")
    clean_error(nmt("train", "--resume", run, "--max-steps", "3", "--data", tmp_path / "other"),
                "not the data this run started with")
    result = nmt("train", "--resume", run, "--max-steps", "3", "--data", tmp_path / "moved")
    assert result.returncode == 0, result.stderr
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3
    assert f"data: {(tmp_path / 'moved').resolve()}" in (run / "config.yaml").read_text()


def test_prepare_makes_its_directory_whole_or_not_at_all(tmp_path, corpus):
    clean_error(nmt("prepare", "--corpus", tmp_path / "nope.tsv", "-o", tmp_path / "data"), "no such file")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    clean_error(nmt("prepare", "--corpus", corpus, "-o", tmp_path / "full"), "--output", "is not empty")
    clean_error(nmt("prepare", "--corpus", corpus, "-o", tmp_path / "full" / "x"), "--output",
                "exists and is not a directory (a file or a device)")
    clean_error(nmt("train", "--data", tmp_path / "nowhere", "--run-dir", tmp_path / "r"), "nowhere: no such directory")
    assert not (tmp_path / "r").exists()


# --- several corpora, weights and filters -------------------------------------------------

def test_several_corpora_are_drawn_by_weight_each_epoch(tmp_path, corpus_file):
    from nmt.models.build import build_model
    from nmt.training.callbacks import TrainCallbacks
    from nmt.training.trainer import Trainer

    lines = corpus_file.read_text().splitlines()
    (tmp_path / "a.tsv").write_text("\n".join(lines[:200]) + "\n")
    (tmp_path / "b.tsv.gz").write_bytes(gzip.compress(("\n".join(lines[200:]) + "\n").encode()))
    weighted = [{"path": str(tmp_path / "a.tsv"), "weight": 2}, {"path": str(tmp_path / "b.tsv.gz"), "weight": 0.5}]
    config = tiny_config(tmp_path / "a.tsv", valid_size=5, test_size=5).replace(corpus=weighted)
    data = prepare_run_data(config.data, tmp_path)
    a, b = data.manifest.corpora
    assert (a["start"], b["start"]) == (0, a["train"]) and a["train"] + b["train"] == len(data.train_src)
    trainer = Trainer(data.sized(config), build_model(data.sized(config).model, 0, data.source_pieces,
                                                      data.target_pieces), data, torch.device("cpu"), TrainCallbacks())
    for epoch in (0, 1):
        drawn = Counter(i for batch in trainer.batches_of_epoch(epoch) for i in batch)
        assert all(drawn[i] == 2 for i in range(a["train"]))  # weight 2: every pair twice
        halves = [i for i in range(a["train"], len(data.train_src)) if drawn[i]]
        assert len(halves) == round(b["train"] / 2) and all(drawn[i] == 1 for i in halves)
        if epoch == 0:
            first_half = halves
    assert halves != first_half  # another half each epoch


def test_duplicates_and_uneven_pairs_are_dropped_and_counted(tmp_path, corpus_file):
    lines = corpus_file.read_text().splitlines()
    uneven = "Tom.\tTom voit le grand chien rouge et le petit chat maintenant aujourd'hui."
    (tmp_path / "c.tsv").write_text("\n".join(lines + lines[:50] + [uneven]) + "\n")
    data = _prepare(tmp_path, "d", corpus=str(tmp_path / "c.tsv"), dedup=True, max_length_ratio=3)
    pairs = data.manifest.pairs
    distinct = len(set(lines))
    assert pairs["duplicates"] == len(lines) + 50 - distinct and pairs["dropped_ratio"] >= 1
    assert pairs["train"] + pairs["valid"] + pairs["test"] + pairs["dropped_ratio"] + pairs["dropped_long"] \
        == distinct + 1


def test_the_corpus_flag_repeats_and_prepared_data_remembers_the_list(tmp_path, corpus_file):
    lines = corpus_file.read_text().splitlines()
    (tmp_path / "a.tsv").write_text("\n".join(lines[:200]) + "\n")
    (tmp_path / "b.tsv").write_text("\n".join(lines[200:]) + "\n")
    data, sizes = tmp_path / "data", ["--vocab-size", "60", "--valid-size", "5", "--test-size", "5"]
    made = nmt("prepare", "--corpus", tmp_path / "a.tsv", "--corpus", tmp_path / "b.tsv", *sizes, "-o", data)
    assert made.returncode == 0, made.stderr
    record = json.loads((data / "data.json").read_text())
    assert [c["path"] for c in record["corpora"]] == [str(tmp_path / "a.tsv"), str(tmp_path / "b.tsv")]
    assert set(record["sources"]) == {"corpus 1", "corpus 2"}
    clean_error(nmt("train", "--data", data, "--corpus", tmp_path / "a.tsv", "--run-dir", tmp_path / "r"),
                "--corpus", "was prepared with")


def test_a_gzipped_corpus_cut_short_is_one_line(tmp_path, corpus_file):
    packed = gzip.compress(corpus_file.read_bytes())
    (tmp_path / "cut.tsv.gz").write_bytes(packed[:len(packed) // 2])
    clean_error(nmt("prepare", "--corpus", tmp_path / "cut.tsv.gz", "-o", tmp_path / "data"),
                f"{tmp_path / 'cut.tsv.gz'}: cannot read (")
    assert not (tmp_path / "data").exists()
