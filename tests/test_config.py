import pytest

from nmt.config import ConfigError, RunConfig, build_config, load_config_file, read_run_config, save_config


def test_flags_override_file_override_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("hidden-size: 64\nlr: 0.01\ntrain:\n  seed: 7\n")
    cfg = build_config(load_config_file(path), {"lr": 0.5})
    assert (cfg.model.hidden_size, cfg.train.lr, cfg.train.seed) == (64, 0.5, 7)
    assert cfg.model.embed_size == RunConfig().model.embed_size


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
    with pytest.raises(ConfigError, match="even hidden_size"):
        build_config({}, {"hidden_size": 7})
    with pytest.raises(ConfigError, match="decoder must be input_feeding or bahdanau, got 'luong'"):
        build_config({"decoder": "luong"}, {})


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
