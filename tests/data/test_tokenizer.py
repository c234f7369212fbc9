import pytest

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from nmt.errors import NmtError


def test_round_trip(tokenizer):
    lines = ["Tom chases the cat.", "Marie voit le petit oiseau aujourd'hui."]
    assert tokenizer.decode(tokenizer.encode(lines)) == lines


def test_special_ids_are_fixed(tokenizer):
    sp = tokenizer.sp
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    assert tokenizer.decode([[BOS_ID] + tokenizer.encode(["Tom"])[0] + [EOS_ID, PAD_ID]]) == ["Tom"]


def test_soft_vocab_limit_on_tiny_corpus(tmp_path):
    tok = Tokenizer.train(["a b c", "b c d"] * 20, tmp_path / "m.model", vocab_size=5000)
    assert 4 < tok.vocab_size < 5000


def test_unreadable_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "spm.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(NmtError, match="spm.model"):
        Tokenizer(bad)
