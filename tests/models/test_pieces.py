"""Each side of the model has rows only for the pieces it meets in training."""
import dataclasses

import torch

from nmt.config import ModelConfig
from nmt.data.batching import make_batch
from nmt.data.prepare import prepare_run_data
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt.inference.beam import beam_search
from nmt.inference.greedy import greedy_search
from nmt.models.build import build_model
from nmt.models.generator import Generator
from nmt.models.loss import masked_cross_entropy
from nmt.models.pieces import PieceMap
from nmt.runtime.checkpoint import load_model_weights, read, save

PIECES = [PAD_ID, UNK_ID, BOS_ID, EOS_ID, 7, 9, 12, 20]
SOURCE = [PAD_ID, UNK_ID, BOS_ID, EOS_ID, 5, 6, 7, 8, 9]


def _restricted(seed: int = 0, vocab: int = 30):
    torch.manual_seed(seed)
    cfg = ModelConfig(embed_size=6, hidden_size=8, layers=2, dropout=0.0, vocab=vocab,
                      source_pieces=len(SOURCE), target_pieces=len(PIECES))
    return cfg, build_model(cfg, PAD_ID, SOURCE, PIECES).eval()


def test_positions_and_piece_ids_invert_each_other_and_unseen_pieces_are_unk():
    gen = Generator(4, 30, 0.0, PieceMap(PIECES, 30))
    assert gen.proj.out_features == len(PIECES)
    ids = torch.tensor(PIECES)
    assert torch.equal(gen.piece_ids(gen.positions(ids)), ids)
    assert gen.positions(torch.tensor([8, 29])).tolist() == [1, 1]  # UNK's position
    full = Generator(4, 30, 0.0)
    assert full.proj.out_features == 30 and torch.equal(full.positions(ids), ids)


def test_loss_is_cross_entropy_over_the_scored_pieces_only():
    gen = Generator(4, 30, 0.0, PieceMap(PIECES, 30))
    outputs = torch.randn(1, 3, 4)
    tgt = torch.tensor([[9, 20, 8]])  # 8 is not scored: its target is UNK
    mask = torch.ones(1, 3, dtype=torch.bool)
    expected = torch.nn.functional.cross_entropy(gen(outputs[0]), torch.tensor([5, 7, 1]),
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
    tensors, _ = read(tmp_path / "w.safetensors", loaded)
    load_model_weights(loaded, tensors, tmp_path / "w.safetensors")
    for side, ids in ((loaded.encoder.embedding, SOURCE), (loaded.decoder.embedding, PIECES),
                      (loaded.generator, PIECES)):
        assert side.pieces.pieces.tolist() == ids
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())


def test_run_data_scores_eos_unk_and_every_training_target_piece(corpus_file, tmp_path):
    from nmt.config import DataConfig

    cfg = dataclasses.replace(DataConfig(corpus=str(corpus_file), vocab_size=60),
                              valid_size=5, test_size=5)
    data = prepare_run_data(cfg, tmp_path)
    source, target = data.source_pieces, data.target_pieces
    for pieces, seqs in ((source, data.train_src), (target, data.train_tgt)):
        assert pieces == sorted(set(pieces)) and pieces[:4] == [PAD_ID, UNK_ID, BOS_ID, EOS_ID]
        assert set().union(*map(set, seqs)) <= set(pieces)
        assert len(pieces) < data.tokenizer.vocab_size
    assert set(source) - set(target), "a joint vocabulary has pieces only the source side uses"


def test_each_side_embeds_through_its_own_rows_and_unknown_pieces_get_unk():
    _, model = _restricted(seed=3)
    assert model.encoder.embedding.num_embeddings == len(SOURCE)
    assert model.decoder.embedding.num_embeddings == len(PIECES)
    assert torch.all(model.encoder.embedding.weight[0] == 0)  # PAD's row
    batch = make_batch([[5, 6, 29]])  # 29 has no source row: it reads UNK's
    unk = make_batch([[5, 6, UNK_ID]])
    torch.testing.assert_close(model.encode(batch.src, batch.src_len).memory,
                               model.encode(unk.src, unk.src_len).memory)


def test_a_side_restricted_model_teacher_forces_as_it_decodes():
    _, model = _restricted(seed=4)
    batch = make_batch([[5, 6, 7, 8]], [[7, 9, 12]])
    outputs, _ = model(batch.src, batch.src_len, batch.tgt_in)
    state = model.encode(batch.src, batch.src_len)
    for i, prev in enumerate(batch.tgt_in[0]):
        out, state, _ = model.step(prev.view(1), state)
        torch.testing.assert_close(out[0], outputs[0, i], rtol=1e-5, atol=1e-6)
