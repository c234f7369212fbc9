import pytest

from nmt.data.corpus import normalize, read_parallel, read_tsv, split_by_source
from nmt.errors import NmtError


def test_normalize_spaces_and_unicode():
    assert normalize("  Cours\u202f!\u00a0 ") == "Cours !"
    assert normalize("e\u0301te\u0301\u200b") == "été"
    assert normalize("a\t\tb") == "a b"


def test_read_tsv_keeps_good_lines_and_counts_skips(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes(b"\xef\xbb\xbfGo.\tVa !\tCC-BY\r\nno tab here\n\tempty source\nBad \xff\tx\nHi.\tSalut !\n")
    pairs, report = read_tsv(path)
    assert pairs == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert report.kept == 2
    assert dict(report.skipped) == {"lines without a tab": 1, "empty side": 1, "invalid UTF-8": 1}
    assert report.examples["lines without a tab"] == [2]
    with pytest.raises(NmtError, match="^strict: "):
        read_tsv(path, strict=True)


def test_read_parallel_requires_equal_line_counts(tmp_path):
    (tmp_path / "a").write_text("x\ny\n")
    (tmp_path / "b").write_text("x\n")
    with pytest.raises(NmtError, match="2 lines.*1"):
        read_parallel(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b").write_text("X\nY\n")
    assert read_parallel(tmp_path / "a", tmp_path / "b")[0] == [("x", "X"), ("y", "Y")]


def test_missing_file_and_directory_are_clear_errors(tmp_path):
    with pytest.raises(NmtError, match="no such file"):
        read_tsv(tmp_path / "nope.tsv")
    with pytest.raises(NmtError, match="is a directory"):
        read_tsv(tmp_path)


def test_split_groups_by_source_and_caps_held_out_parts():
    pairs = [(f"s{i % 50}", f"t{i}") for i in range(200)]  # 50 sources, 4 translations each
    split = split_by_source(pairs, valid_size=100, test_size=100)
    assert len({s for s, _ in split.test}) == 5 and len({s for s, _ in split.valid}) == 5
    train_src = {s for s, _ in split.train}
    assert not train_src & {s for s, _ in split.test + split.valid}
    assert sorted(split.train + split.valid + split.test) == sorted(pairs)


def test_split_is_independent_of_line_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(100)]
    a = split_by_source(pairs, 5, 5)
    b = split_by_source(list(reversed(pairs)), 5, 5)
    assert sorted(a.test) == sorted(b.test) and sorted(a.valid) == sorted(b.valid)
