"""The generator scores only the pieces seen in training targets."""
import dataclasses

import torch

from nmt.batching import make_batch
from nmt.checkpoint import load_model_weights, read, save
from nmt.config import ModelConfig
from nmt.loss import masked_cross_entropy
from nmt.model import Generator, build_model
from nmt.prepare import prepare_run_data
from nmt.search import beam_search, greedy_search
from nmt.tokenizer import EOS_ID, PAD_ID, UNK_ID

PIECES = [UNK_ID, EOS_ID, 7, 9, 12, 20]


def _restricted(seed: int = 0, vocab: int = 30):
    torch.manual_seed(seed)
    cfg = ModelConfig(embed_size=6, hidden_size=8, layers=2, dropout=0.0, vocab=vocab,
                      output_pieces=len(PIECES))
    return cfg, build_model(cfg, PAD_ID, PIECES).eval()


def test_positions_and_piece_ids_invert_each_other_and_unseen_pieces_are_unk():
    gen = Generator(4, 30, 0.0, torch.tensor(PIECES))
    assert gen.proj.out_features == len(PIECES)
    ids = torch.tensor(PIECES)
    assert torch.equal(gen.piece_ids(gen.positions(ids)), ids)
    assert gen.positions(torch.tensor([8, 29])).tolist() == [0, 0]  # UNK's position
    full = Generator(4, 30, 0.0)
    assert full.proj.out_features == 30 and torch.equal(full.positions(ids), ids)


def test_loss_is_cross_entropy_over_the_scored_pieces_only():
    gen = Generator(4, 30, 0.0, torch.tensor(PIECES))
    outputs = torch.randn(1, 3, 4)
    tgt = torch.tensor([[9, 20, 8]])  # 8 is not scored: its target is UNK
    mask = torch.ones(1, 3, dtype=torch.bool)
    expected = torch.nn.functional.cross_entropy(gen(outputs[0]), torch.tensor([3, 5, 0]),
                                                 reduction="sum")
    torch.testing.assert_close(masked_cross_entropy(gen, outputs, tgt, mask), expected)


def test_search_returns_tokenizer_ids_of_scored_pieces():
    _, model = _restricted(seed=1)
    batch = make_batch([[5, 6, 7], [8, 9]])
    budget = torch.tensor([8, 8])
    for hyp in greedy_search(model, batch.src, batch.src_len, budget):
        assert set(hyp.tokens) <= set(PIECES) - {EOS_ID}
    for hyps in beam_search(model, batch.src, batch.src_len, budget, beam=3, nbest=3):
        for hyp in hyps:
            assert set(hyp.tokens) <= set(PIECES) - {EOS_ID}


def test_checkpoint_restores_the_scored_pieces(tmp_path):
    cfg, model = _restricted(seed=2)
    save(tmp_path / "w.safetensors", model)
    loaded = build_model(cfg, PAD_ID)  # placeholder ids until the checkpoint fills them
    tensors, _ = read(tmp_path / "w.safetensors")
    load_model_weights(loaded, tensors, tmp_path / "w.safetensors")
    assert loaded.generator.pieces.tolist() == PIECES
    assert torch.equal(loaded.generator.position, model.generator.position)


def test_run_data_scores_eos_unk_and_every_training_target_piece(corpus_file, tmp_path):
    from nmt.config import DataConfig

    cfg = dataclasses.replace(DataConfig(corpus=str(corpus_file), vocab_size=60),
                              valid_size=5, test_size=5)
    data = prepare_run_data(cfg, tmp_path)
    pieces = data.output_pieces
    assert pieces == sorted(set(pieces)) and {EOS_ID, UNK_ID} <= set(pieces)
    assert set().union(*map(set, data.train_tgt)) <= set(pieces)
    source_only = set().union(*map(set, data.train_src)) - set(pieces)
    assert source_only, "a joint vocabulary has pieces only the source side uses"
    assert len(pieces) < data.tokenizer.vocab_size
