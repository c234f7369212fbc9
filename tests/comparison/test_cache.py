"""The hypotheses cache: a hit only for the same decoding and the same number of lines; a
cache that cannot be written is skipped with a warning."""
import logging
from pathlib import Path

from nmt.comparison.cache import HypothesisCache, key_of


def test_a_hit_needs_the_same_identity_and_line_count(tmp_path: Path) -> None:
    cache = HypothesisCache(tmp_path)
    identity = {"weights": "abc", "search": {"beam": 1}}
    assert cache.get(identity, 2) is None
    cache.put(identity, ["un", ""])
    assert cache.get(identity, 2) == ["un", ""]  # an empty hypothesis is a line
    assert cache.get(identity, 3) is None
    assert cache.get({**identity, "search": {"beam": 5}}, 2) is None
    assert key_of(identity) == key_of(dict(reversed(identity.items())))
    (cache.folder / f"{key_of(identity)}.json").write_text("{damaged", encoding="utf-8")
    assert cache.get(identity, 2) is None


def test_a_read_only_run_is_decoded_without_a_cache(tmp_path: Path, caplog) -> None:
    (tmp_path / "hypotheses").write_text("a file where the folder would go", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        HypothesisCache(tmp_path).put({"k": 1}, ["x"])
    assert "could not keep the hypotheses" in caplog.text
