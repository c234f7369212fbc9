"""The Transformer through the command line: train, resume, translate, attn-plot, info, bench."""
import json

import pytest
from conftest import TINY, nmt
from PIL import Image


def one_size() -> list[str]:
    """TINY's sizes with embed size = hidden size, as a transformer has one size."""
    sizes = list(TINY)
    sizes[sizes.index("--embed-size") + 1] = sizes[sizes.index("--hidden-size") + 1]
    return sizes


TRANSFORMER = ["--arch", "transformer", "--heads", "2", "--ff-size", "16", "--layers", "2"]


@pytest.fixture(scope="module")
def transformer_run(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("transformer") / "run"
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "6",
                 *one_size(), *TRANSFORMER)
    assert result.returncode == 0, result.stderr
    return run


def test_a_transformer_trains_resumes_and_translates_through_the_cli(transformer_run):
    assert nmt("train", "--resume", str(transformer_run), "--max-steps", "8").returncode == 0
    out = nmt("translate", "--checkpoint", str(transformer_run), "--beam", "2", "Tom sees the cat.", "")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2
    nbest = nmt("translate", "--checkpoint", str(transformer_run), "--beam", "3", "--nbest", "2",
                "--precision", "int8", "Tom sees the cat.")
    assert nbest.returncode == 0, nbest.stderr
    rows = [line.split("\t") for line in nbest.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0"] and float(rows[0][1]) >= float(rows[1][1])  # best first
    scores = nmt("eval", "--checkpoint", str(transformer_run), "--bleu", "--beam", "2", "--json")
    assert scores.returncode == 0, scores.stderr
    assert 0 <= json.loads(scores.stdout)["scores"]["bleu"]["score"] <= 100


def test_info_names_the_architecture_and_counts_parameters_per_block(transformer_run):
    card = json.loads(nmt("info", "--checkpoint", str(transformer_run), "--json").stdout)
    assert "Transformer" in card["architecture"] and "post-norm" in card["architecture"]
    blocks = card["parameters per block"]
    # post-norm: no final norms, so no blocks for them
    assert set(blocks) == {"src_embedding", "tgt_embedding", "encoder", "decoder", "generator"}
    assert "2 layers of" in blocks["encoder"]
    total = sum(int(v.split()[0].replace(",", "")) for v in blocks.values())
    assert total == card["parameters"]
    assert card["sizes"]["heads"] == 2 and card["sizes"]["feed-forward"] == 16


def test_a_small_corpus_gets_the_small_corpus_settings_and_info_says_so(transformer_run):
    card = json.loads(nmt("info", "--checkpoint", str(transformer_run), "--json").stdout)
    assert "tied decoder embeddings" in card["architecture"]
    assert card["training"]["set by corpus size"].startswith("tie_embeddings true, label_smoothing 0.2, "
                                                            "rdrop_alpha 5.0 (")
    assert "training pairs, under 50,000" in card["training"]["set by corpus size"]
    assert card["training"]["R-Drop alpha"] == 5.0
    saved = (transformer_run / "config.yaml").read_text()
    assert "tie_embeddings: true" in saved and "label_smoothing: 0.2" in saved and "rdrop_alpha: 5.0" in saved


@pytest.mark.parametrize("kind", ["cross", "encoder", "decoder"])
def test_attn_plot_draws_each_kind_per_head_and_as_a_grid(transformer_run, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    result = nmt("attn-plot", "--checkpoint", str(transformer_run), "Tom sees the cat.", "Mary likes it.",
                 "--kind", kind, "--head", "all", "--layer", "1", "-o", str(out), "--show")
    assert result.returncode == 0, result.stderr
    assert Image.open(out).format == "PNG"
    assert result.stdout.count("head 2 of 2") == 2 and "layer 1 of 2" in result.stdout
    one = nmt("attn-plot", "--checkpoint", str(transformer_run), "Tom sees the cat.", "--kind", kind,
              "--head", "2", "-o", str(tmp_path / "one.svg"), "--show")
    assert one.returncode == 0 and "layer 2 of 2, head 2 of 2" in one.stdout


@pytest.mark.parametrize("flags, needle", [
    (["--layer", "3"], "--layer 3: this Transformer has layers 1 to 2"),
    (["--head", "5"], "--head 5: this Transformer has heads 1 to 2"),
    (["--head", "some"], "--head must be a number from 1, mean or all"),
    (["--kind", "self"], "--kind must be cross, encoder, decoder"),
])
def test_attn_plot_refuses_a_layer_head_or_kind_the_model_lacks(transformer_run, tmp_path, flags, needle):
    result = nmt("attn-plot", "--checkpoint", str(transformer_run), "Tom sees the cat.", *flags,
                 "-o", str(tmp_path / "a.png"))
    assert result.returncode == 1 and result.stderr.startswith("error:"), result.stderr
    assert needle in " ".join(result.stderr.split())
    assert not (tmp_path / "a.png").exists()


def test_a_gru_model_has_cross_attention_only(tiny_run, tmp_path):
    result = nmt("attn-plot", "--checkpoint", str(tiny_run), "Tom sees the cat.", "--kind", "encoder",
                 "-o", str(tmp_path / "a.png"))
    assert result.returncode == 1
    assert "--kind encoder: this GRU model has cross attention only" in " ".join(result.stderr.split())


def test_too_many_heads_times_sentences_is_refused_before_drawing(transformer_run, tmp_path):
    result = nmt("attn-plot", "--checkpoint", str(transformer_run), *["Tom."] * 7, "--head", "all",
                 "-o", str(tmp_path / "a.png"))
    assert result.returncode == 1 and "7 sentences x 2 heads is 14" in " ".join(result.stderr.split())


def test_bench_measures_a_transformer(corpus, transformer_run, tmp_path):
    out = tmp_path / "bench.json"
    result = nmt("bench", "--corpus", str(corpus), "--pairs", "100", "--steps", "2", "--warmup", "1",
                 "--embed-size", "12", "--hidden-size", "12", "--vocab-size", "60", "--batch-size", "16",
                 *TRANSFORMER, "--checkpoint", str(transformer_run), "--sentences", "8", "--beam", "2",
                 "--device", "cpu", "--json-out", str(out))
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["settings"]["model"].startswith("Transformer: 2 encoder and 2 decoder layers")
    assert record["train"]["sentences_per_s"] > 0 and record["train"]["gflop_per_step"] > 0
    assert set(record["translate"]) == {"greedy", "beam 2"}
