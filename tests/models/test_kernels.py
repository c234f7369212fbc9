"""kernels fast vs reference: the hand-written paths train and decode as plain PyTorch does."""
import random

import pytest
import torch
from conftest import tiny_model

from nmt.data.batching import make_batch
from nmt.inference.beam import beam_search
from nmt.inference.greedy import greedy_search
from nmt.models.kernels import use_kernels
from nmt.models.loss import batch_loss

VOCAB = 40


def _batches(n: int, seed: int = 3) -> list:
    """A copy task, so that attention matters and its gradients are not negligible."""
    rng = random.Random(seed)
    def sentence():
        return [rng.randrange(4, VOCAB) for _ in range(rng.randint(1, 9))]
    return [make_batch(*zip(*[(s, s) for s in (sentence() for _ in range(6))])) for _ in range(n)]


def _model(kernels: str, decoder: str = "input_feeding", attention: str = "additive", tied: bool = False):
    """A tiny model with weights in +-0.5: at +-0.1 attention is flat, and its gradients
    (norm 1e-9) are float32 rounding noise that no comparison could check."""
    model = tiny_model(VOCAB, decoder=decoder, attention=attention, tie_embeddings=tied)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(5)
    return use_kernels(model, kernels).train()


def _trained(kernels: str, decoder: str, attention: str, epochs: int = 3):
    model = _model(kernels, decoder, attention)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # not Adam: it hides a gradient's scale
    losses = []
    for batch in _batches(4) * epochs:
        optimizer.zero_grad()
        loss = batch_loss(model, batch, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses


@pytest.mark.parametrize("decoder, attention", [("input_feeding", "additive"), ("bahdanau", "additive"),
                                                ("input_feeding", "dot"), ("bahdanau", "dot")])
def test_fast_and_reference_kernels_train_to_the_same_weights_and_decode_the_same(decoder, attention):
    fast, fast_losses = _trained("fast", decoder, attention)
    ref, ref_losses = _trained("reference", decoder, attention)
    assert sum(ref_losses[-4:]) < sum(ref_losses[:4])  # it learns: the comparison is of real updates
    # float32 rounding leaves the paths' weights within 1e-6 of each other.
    torch.testing.assert_close(fast_losses, ref_losses, rtol=1e-5, atol=0)
    for (name, a), b in zip(fast.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)
    batch = make_batch([[5, 9, 11], list(range(4, 20)), [7]])
    max_len = torch.full((3,), 14)
    with torch.no_grad():
        for search in (lambda m: greedy_search(m, batch.src, batch.src_len, max_len),
                       lambda m: [h[0] for h in beam_search(m, batch.src, batch.src_len, max_len, beam=3)]):
            assert [h.tokens for h in search(fast)] == [h.tokens for h in search(use_kernels(fast, "reference"))]
            use_kernels(fast, "fast")


@pytest.mark.parametrize("decoder, attention, tied", [("input_feeding", "additive", False), ("bahdanau", "dot", False),
                                                     ("input_feeding", "additive", True)])
def test_fast_and_reference_gradients_agree_tensor_by_tensor(decoder, attention, tied):
    """Each parameter's gradient, relative to its own norm: a 1% error in any one shows, however
    small that gradient is beside the others. Tied, the decoder's embedding gathers the output
    layer's gradient too."""
    batch = _batches(1)[0]
    grads = {}
    for kernels in ("fast", "reference"):
        model = _model(kernels, decoder, attention, tied)
        assert (model.generator.proj.weight is model.decoder.embedding.weight) is tied
        batch_loss(model, batch, label_smoothing=0.1).backward()
        grads[kernels] = {name: p.grad for name, p in model.named_parameters()}
    for name, ref in grads["reference"].items():
        error = (grads["fast"][name] - ref).norm() / ref.norm().clamp_min(1e-12)
        assert error < 1e-4, f"{name}: relative gradient error {error:.2e}"


def test_the_fast_path_is_really_taken_and_the_reference_is_not():
    """Guards the switch itself: bptt's autograd node appears only with fast kernels on CPU."""
    batch = _batches(1)[0]
    for kernels, expected in (("fast", True), ("reference", False)):
        loss = batch_loss(_model(kernels), batch)
        seen, todo = set(), [loss.grad_fn]
        while todo:
            node = todo.pop()
            if node is not None and node not in seen:
                seen.add(node)
                todo += [n for n, _ in node.next_functions]
        names = {type(node).__name__ for node in seen}
        assert ("_TeacherForcedBackward" in names) is expected
        assert ("_PackedGRUBackward" in names) is expected


def test_an_unknown_kernels_value_is_a_clear_error():
    from nmt.errors import NmtError
    with pytest.raises(NmtError, match="kernels must be fast or reference, got 'quick'"):
        use_kernels(tiny_model(VOCAB), "quick")
