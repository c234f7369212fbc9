import json

from conftest import nmt

from nmt.tools.bench import PeakRSS, pick_sources


def test_peak_rss_sees_an_allocation():
    with PeakRSS() as rss:
        block = bytearray(64 * 2**20)
        block[::4096] = b"x" * len(block[::4096])
    assert rss.peak >= 64 * 2**20


def test_pick_sources_repeats_and_is_fixed():
    assert sorted(pick_sources(["a", "b"], 5)) == ["a", "a", "a", "b", "b"]
    assert pick_sources(["a", "b", "c"], 3) == pick_sources(["a", "b", "c"], 3)


def test_bench_measures_every_phase(corpus, tiny_run, tmp_path):
    out = tmp_path / "bench.json"
    result = nmt("bench", "--corpus", str(corpus), "--pairs", "200", "--steps", "3", "--warmup", "1",
                 "--embed-size", "8", "--hidden-size", "12", "--layers", "1", "--vocab-size", "60",
                 "--batch-size", "16", "--checkpoint", str(tiny_run), "--sentences", "20", "--beam", "2",
                 "--length-penalty", "0", "--device", "cpu", "--json-out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert json.loads(result.stdout) == record  # --json prints what --json-out writes
    train = record["train"]
    assert train["steps"] == 3 and train["sentences_per_s"] > 0 and 0 <= train["padding_fraction"] < 1
    assert train["peak_rss_mb"] > 50
    assert train["gflop_per_step"] > 0 and train["matmul_peak_gflops"] > 0
    assert abs(train["peak_fraction"] - train["gflops"] / train["matmul_peak_gflops"]) < 0.01
    assert set(record["translate"]) == {"greedy", "beam 2"}
    assert all(p["sentences"] == 20 and p["sentences_per_s"] > 0 for p in record["translate"].values())
    assert record["settings"]["length_penalty"] == 0.0
    table = nmt("bench", "--corpus", str(corpus), "--pairs", "50", "--steps", "1", "--warmup", "0",
                "--embed-size", "8", "--hidden-size", "12", "--layers", "1", "--vocab-size", "60",
                "--checkpoint", str(tiny_run), "--sentences", "4", "--beam", "2", "--device", "cpu", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert (tmp_path / "bench.json").is_file()  # the default file, beside the table
    for words in ("train", "GFLOPS", "beam 2", "alpha"):
        assert words in table.stdout
