import pytest

from nmt.config import ConfigError, build_config, load_config_file, read_run_config, save_config


def test_flags_override_file_override_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("hidden-size: 64\nlr: 0.01\ntrain:\n  seed: 7\n")
    cfg = build_config(load_config_file(path), {"lr": 0.5})
    assert (cfg.model.hidden_size, cfg.train.lr, cfg.train.seed) == (64, 0.5, 7)
    assert cfg.model.embed_size is None  # a GRU's width not given follows the corpus size


def test_unknown_key_lists_valid_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("hiden_size: 64\n")
    with pytest.raises(ConfigError, match="unknown config key 'hiden_size'.*hidden_size"):
        load_config_file(path)


def test_invalid_values_are_rejected():
    with pytest.raises(ConfigError, match="dropout"):
        build_config({}, {"dropout": 1.5})
    with pytest.raises(ConfigError, match="not both"):
        build_config({}, {"corpus": "a", "src_file": "b", "tgt_file": "c"})
    with pytest.raises(ConfigError, match="^hidden_size 7: a bidirectional encoder needs an even size"):
        build_config({}, {"hidden_size": 7})
    with pytest.raises(ConfigError, match="^decoder 'luong': must be input-feeding or bahdanau"):
        build_config({"decoder": "luong"}, {})
    # a choice takes the CLI's hyphens or the config's underscores, and is stored one way
    assert build_config({}, {"decoder": "input-feeding"}).model.decoder == "input_feeding"
    assert build_config({"decoder": "input_feeding"}, {}).model.decoder == "input_feeding"
    with pytest.raises(ConfigError, match=r"^init_range 1000: must be in \[0, 1\]"):
        build_config({"init_range": 1000}, {})


def test_errors_name_settings_as_each_front_end_does():
    with pytest.raises(ConfigError) as refused:
        build_config({}, {"arch": "transformer", "hidden_size": 32, "embed_size": 32, "heads": 3})
    assert str(refused.value) == "hidden_size 32: must be a multiple of heads (3)"
    assert refused.value.render(lambda name: "--" + name.replace("_", "-")) == \
        "--hidden-size 32: must be a multiple of --heads (3)"


def test_saved_config_round_trips(tmp_path):
    cfg = build_config({}, {"hidden_size": 32, "corpus": "x.tsv"})
    save_config(cfg, tmp_path / "config.yaml")
    assert read_run_config(tmp_path / "config.yaml") == cfg
    # the saved file is itself a valid --config file
    assert build_config(load_config_file(tmp_path / "config.yaml"), {}) == cfg


def test_bad_yaml_names_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="c.yaml"):
        load_config_file(path)


def test_several_corpora_are_paths_or_weighted_mappings():
    cfg = build_config({"corpus": ["a.tsv", {"path": "b.tsv.gz", "weight": 2.5}]}, {})
    assert [(c.path, c.weight) for c in cfg.data.corpora()] == [("a.tsv", 1.0), ("b.tsv.gz", 2.5)]
    assert cfg.data.files() == {"corpus 1": "a.tsv", "corpus 2": "b.tsv.gz"}
    assert build_config({}, {"corpus": "a.tsv"}).data.files() == {"corpus": "a.tsv"}
    for bad, message in [([], "an empty list names no corpus"), ([{"path": "a", "weight": 0}], "weight must be"),
                         ([{"file": "a"}], "entry 1 must be a path, or a mapping"),
                         ([{"path": "a", "weight": True}], "entry 1 must be")]:
        with pytest.raises(ConfigError, match=message):
            build_config({"corpus": bad}, {})
    with pytest.raises(ConfigError, match="^max_length_ratio 0.5: must be 0"):
        build_config({}, {"max_length_ratio": 0.5})


def test_the_default_budget_is_patience_under_an_epoch_cap_and_any_budget_given_replaces_it():
    from nmt.config import TrainConfig
    from nmt.defaults import DEFAULT_MAX_EPOCHS, DEFAULT_PATIENCE
    default = TrainConfig()
    assert (default.epoch_limit, default.patience_limit) == (DEFAULT_MAX_EPOCHS, DEFAULT_PATIENCE)
    assert default.budget_text() == (f"until validation BLEU has not improved for {DEFAULT_PATIENCE} "
                                     f"validations, at most {DEFAULT_MAX_EPOCHS} epochs")
    minutes = TrainConfig(max_minutes=20)
    assert minutes.patience_limit == 0 and minutes.epoch_limit == float("inf")
    assert minutes.budget_text() == "20 minutes"
    both = TrainConfig(epochs=10, patience=5)
    assert both.budget_text() == "until validation BLEU has not improved for 5 validations, 10 epochs"
    assert TrainConfig(patience=0).budget_text() == f"at most {DEFAULT_MAX_EPOCHS} epochs"


def test_corpus_sized_settings_follow_the_training_pair_count():
    from nmt.defaults import DEFAULT_PATIENCE, SMALL_CORPUS_PAIRS
    transformer = build_config({}, {"arch": "transformer"})
    assert (transformer.model.tie_embeddings, transformer.train.label_smoothing) == (None, None)
    small = transformer.for_corpus(SMALL_CORPUS_PAIRS - 1)
    assert (small.model.tie_embeddings, small.train.label_smoothing, small.train.rdrop_alpha) == (True, 0.2, 5.0)
    assert small.train.by_corpus_size == (f"tie_embeddings true, label_smoothing 0.2, rdrop_alpha 5.0, patience 6 "
                                          f"({SMALL_CORPUS_PAIRS - 1:,} "
                                          f"training pairs, under {SMALL_CORPUS_PAIRS:,})")
    large = transformer.for_corpus(SMALL_CORPUS_PAIRS)
    assert (large.model.tie_embeddings, large.train.label_smoothing, large.train.rdrop_alpha) == (False, 0.1, 0.0)
    assert "at least" in large.train.by_corpus_size
    assert (small.train.patience_limit, large.train.patience_limit) == (6, DEFAULT_PATIENCE)
    # patience follows the size only under the default budget: a budget given keeps its own
    budgeted = build_config({}, {"arch": "transformer", "epochs": 10}).for_corpus(10)
    assert budgeted.train.patience is None and budgeted.train.patience_limit == 0
    assert build_config({}, {}).for_corpus(10).train.patience_limit == DEFAULT_PATIENCE  # not the GRU's
    # a value given, in a file or a flag, is kept whatever the size
    given = build_config({"label_smoothing": 0.3}, {"arch": "transformer", "tie_embeddings": False, "rdrop_alpha": 0,
                                                    "patience": 2})
    kept = given.for_corpus(10)
    assert (kept.model.tie_embeddings, kept.train.label_smoothing, kept.train.rdrop_alpha) == (False, 0.3, 0)
    assert kept.train.patience == 2
    assert kept.train.by_corpus_size == "" and kept is given
    gru = build_config({}, {})
    assert (gru.model.dropout, gru.train.source_word_dropout, gru.train.label_smoothing) == (None, None, None)
    small = gru.for_corpus(SMALL_CORPUS_PAIRS - 1)
    assert (small.model.dropout, small.train.source_word_dropout, small.train.label_smoothing) == (0.3, 0.1, 0.2)
    assert small.model.tie_embeddings and "tie_embeddings true" in small.train.by_corpus_size
    assert (small.model.embed_size, small.model.hidden_size) == (512, 512)
    large = gru.for_corpus(SMALL_CORPUS_PAIRS)
    assert (large.model.dropout, large.train.source_word_dropout, large.train.label_smoothing) == (0.2, 0.0, 0.1)
    assert (large.model.tie_embeddings, large.model.embed_size, large.model.hidden_size) == (False, 256, 256)
    # a GRU ties only where its output layer reads what its embedding holds
    narrow = build_config({}, {"embed_size": 128}).for_corpus(10)
    assert (narrow.model.embed_size, narrow.model.hidden_size) == (128, 512)
    assert narrow.model.tie_embeddings is False and "tie_embeddings false" in narrow.train.by_corpus_size
    told = build_config({}, {"hidden_size": 384, "tie_embeddings": True}).for_corpus(10)  # told to tie:
    assert (told.model.embed_size, told.model.hidden_size, told.model.tie_embeddings) == (384, 384, True)  # follows
    with pytest.raises(ConfigError, match="a transformer's size does not follow the corpus size"):
        build_config({}, {"arch": "transformer", "hidden_size": None})
    assert transformer.for_corpus(10).model.dropout == 0.1  # the Transformer's dropout is not by size
