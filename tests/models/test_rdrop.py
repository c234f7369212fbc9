"""R-Drop (--rdrop-alpha): the loss over a batch run twice through other dropout masks."""
import torch
import torch.nn.functional as F

from nmt.config import ModelConfig
from nmt.data.batching import make_batch
from nmt.data.tokenizer import PAD_ID
from nmt.inference.loading import load_run
from nmt.models.build import build_model
from nmt.models.loss import batch_loss
from nmt.training.runs import train_new_run
from conftest import make_pairs, tiny_config, tiny_model


def _batch(tokenizer, n=6):
    pairs = make_pairs(n, seed=3)
    return make_batch(tokenizer.encode([s for s, _ in pairs]), tokenizer.encode([t for _, t in pairs]))


def _gradients(model):
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_without_dropout_rdrop_is_the_plain_loss_and_gradient(tokenizer):
    """Two copies through the same (no) dropout agree: the KL term is 0, and the mean of two
    equal cross-entropies is one, with the same gradient."""
    model, batch = tiny_model(tokenizer.vocab_size), _batch(tokenizer)
    results = []
    for alpha in (0.0, 5.0):
        model.zero_grad()
        loss = batch_loss(model, batch, 0.1, rdrop_alpha=alpha)
        loss.backward()
        results.append((loss.detach(), _gradients(model)))
    (plain, plain_grads), (rdrop, rdrop_grads) = results
    torch.testing.assert_close(rdrop, plain, rtol=1e-5, atol=1e-5)
    for got, want in zip(rdrop_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_rdrop_adds_alpha_over_4_times_the_two_passes_symmetric_kl(tokenizer):
    """Against torch's own cross-entropy and KL divergence, from the same dropout draws."""
    torch.manual_seed(0)
    cfg = ModelConfig(embed_size=6, hidden_size=8, layers=1, dropout=0.3, vocab=tokenizer.vocab_size)
    model, batch, alpha, smoothing = build_model(cfg, PAD_ID).train(), _batch(tokenizer), 3.0, 0.1
    torch.manual_seed(1)
    loss = batch_loss(model, batch, smoothing, rdrop_alpha=alpha)

    torch.manual_seed(1)  # the same draws, in the same order: the doubled pass, then the generator's dropout
    twice = batch.twice()
    outputs, _ = model(twice.src, twice.src_len, twice.tgt_in)
    generator = model.generator
    logits = generator.proj(generator.dropout(outputs[twice.tgt_mask]))
    gold = generator.positions(twice.tgt_out[twice.tgt_mask])
    cross_entropy = F.cross_entropy(logits, gold, reduction="sum", label_smoothing=smoothing)
    first, second = F.log_softmax(logits, dim=-1).chunk(2)
    kl = (F.kl_div(second, first, log_target=True, reduction="sum")  # KL(p1 || p2)
          + F.kl_div(first, second, log_target=True, reduction="sum"))  # KL(p2 || p1)
    assert kl > 1e-3  # the two copies' masks differ
    torch.testing.assert_close(loss, cross_entropy / 2 + alpha / 4 * kl, rtol=1e-5, atol=1e-5)


def test_a_doubled_batch_repeats_every_row():
    batch = make_batch([[5, 6], [7]], [[8], [9, 10, 11]])
    twice = batch.twice()
    for name in ("src", "src_len", "tgt_in", "tgt_out", "tgt_mask"):
        half = getattr(batch, name)
        torch.testing.assert_close(getattr(twice, name), torch.cat([half, half]))
    assert twice.n_tokens == 2 * batch.n_tokens


def _disagreement(run, pairs) -> float:
    """Mean symmetric KL per target token between two dropout passes of the run's last weights."""
    _, model, tokenizer = load_run(run, torch.device("cpu"), weights="last")
    twice = make_batch(tokenizer.encode([s for s, _ in pairs]), tokenizer.encode([t for _, t in pairs])).twice()
    model.train()
    torch.manual_seed(0)
    with torch.no_grad():
        outputs, _ = model(twice.src, twice.src_len, twice.tgt_in)
        first, second = F.log_softmax(model.logits(outputs[twice.tgt_mask]).float(), dim=-1).chunk(2)
    return float(((first.exp() - second.exp()) * (first - second)).sum(dim=1).mean())


def test_training_with_rdrop_makes_two_dropout_passes_agree(tmp_path, corpus_file):
    """What R-Drop is for: from the same start, its model's outputs depend less on which units
    dropout drops (a tenth as much here) than a model trained without it."""
    for alpha in (0, 50):
        train_new_run(tiny_config(corpus_file, dropout=0.3, rdrop_alpha=alpha, max_steps=40, valid_every=40,
                                  average_last=0), tmp_path / f"alpha{alpha}")
    pairs = make_pairs(64, seed=9)
    assert _disagreement(tmp_path / "alpha50", pairs) < 0.3 * _disagreement(tmp_path / "alpha0", pairs)
