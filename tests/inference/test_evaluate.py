import pytest

from nmt.errors import NmtError
from nmt.inference.evaluate import file_test_set


def test_empty_reference_lines_become_none(tmp_path):
    (tmp_path / "src").write_text("a\nb\n")
    (tmp_path / "ref1").write_text("A\nB\n")
    (tmp_path / "ref2").write_text("AA\n\n")
    test = file_test_set(tmp_path / "src", [tmp_path / "ref1", tmp_path / "ref2"])
    assert test.refs == [["A", "B"], ["AA", None]]


def test_line_count_mismatch_is_a_clear_error(tmp_path):
    (tmp_path / "src").write_text("a\nb\nc\n")
    (tmp_path / "ref").write_text("A\nB\n")
    with pytest.raises(NmtError, match="ref has 2 lines but .*src has 3"):
        file_test_set(tmp_path / "src", [tmp_path / "ref"])


def test_a_line_without_any_reference_is_an_error(tmp_path):
    (tmp_path / "src").write_text("a\nb\n")
    (tmp_path / "ref").write_text("A\n\n")
    with pytest.raises(NmtError, match="line 2"):
        file_test_set(tmp_path / "src", [tmp_path / "ref"])


def test_run_test_set_scores_each_source_once(tmp_path):
    from nmt.config import RunConfig, save_config
    from nmt.inference.evaluate import run_test_set

    save_config(RunConfig(), tmp_path / "config.yaml")
    (tmp_path / "test.tsv").write_text("Go.\tVa !\nHi.\tSalut !\nGo.\tBouge !\nGo.\tMarche.\n")
    single = run_test_set(tmp_path)
    assert single.sources == ["Go.", "Hi."]
    assert single.refs == [["Va !", "Salut !"]]
    multi = run_test_set(tmp_path, all_refs=True)
    assert multi.sources == ["Go.", "Hi."]
    assert multi.refs == [["Va !", "Salut !"], ["Bouge !", None], ["Marche.", None]]


def test_a_given_test_set_is_scored_line_by_line(tmp_path):
    from nmt.config import RunConfig, save_config
    from nmt.inference.evaluate import run_test_set

    save_config(RunConfig().replace(test_src="/data/test.en", test_tgt="/data/test.fr"), tmp_path / "config.yaml")
    (tmp_path / "test.tsv").write_text("Go.\tVa !\nGo.\tBouge !\n")
    given = run_test_set(tmp_path, all_refs=True)
    assert given.sources == ["Go.", "Go."] and given.refs == [["Va !", "Bouge !"]]
    assert given.name.startswith("/data/test.en")


def test_an_empty_test_set_is_a_clear_error(tmp_path):
    from nmt.config import RunConfig, save_config
    from nmt.inference.evaluate import run_test_set

    save_config(RunConfig(), tmp_path / "config.yaml")
    (tmp_path / "test.tsv").write_text("")
    with pytest.raises(NmtError, match=r"trained with test_size 0\); score files with src and ref"):
        run_test_set(tmp_path)
    (tmp_path / "src").write_text("")
    (tmp_path / "ref").write_text("")
    with pytest.raises(NmtError, match="src: empty"):
        file_test_set(tmp_path / "src", [tmp_path / "ref"])
