import pytest
import torch
from torch import nn

from nmt.inference.argmax import LinearArgmax, beam_topk, row_topk

needs_fbgemm = pytest.mark.skipif(not LinearArgmax.available(nn.Linear(4, 4)),
                                  reason="this torch has no FBGEMM int8 kernels")


def test_row_topk_equals_torch_topk():
    torch.manual_seed(0)
    for rows, columns in ((1, 5648), (9, 5648), (128, 5648), (20, 28240), (20, 300), (20, 7)):
        scores = torch.randn(rows, columns)
        scores[rows // 2, -1] = 60.0  # the best score in the short last block
        for k in (k for k in (1, 2, 10) if k <= columns):
            values, indices = row_topk(scores, k)
            expected = scores.topk(k, dim=1)
            assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
        scores[0, 0] = scores[0, columns - 2] = scores[-1, columns // 3] = scores[-1, columns // 2] = 50.0
        values, indices = row_topk(scores, 1)  # ties: the first index, as torch.max gives
        expected = scores.max(dim=1)
        assert torch.equal(values.squeeze(1), expected.values)
        assert torch.equal(indices.squeeze(1), expected.indices)


def test_beam_topk_equals_the_topk_of_the_full_sum():
    torch.manual_seed(0)
    for sentences, width, vocab in ((9, 1, 5648), (128, 5, 5648), (20, 4, 2560), (12, 5, 3000), (20, 5, 300)):
        log_probs = torch.log_softmax(3 * torch.randn(sentences * width, vocab), dim=1)
        scores = -10 * torch.rand(sentences, width)
        log_probs[0, -1] = 0.0  # the best continuation, in the first beam's short last block
        scores[0, 0] = 0.0
        for k in (1, 2, 10):
            values, indices = beam_topk(log_probs, scores, k)
            expected = (scores.view(-1, 1) + log_probs).view(sentences, width * vocab).topk(k, dim=1)
            assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
            assert indices[0, 0] == vocab - 1


def _layer(outputs=600, inputs=64, seed=0):
    torch.manual_seed(seed)
    layer = nn.Linear(inputs, outputs)
    nn.init.uniform_(layer.weight, -0.3, 0.3)
    return layer


def _count_addmm_rows(monkeypatch) -> list[int]:
    """Record the rows of every float32 ``torch.addmm`` from now on (the float32 fallback)."""
    calls, addmm = [], torch.addmm
    monkeypatch.setattr(torch, "addmm", lambda *a, **k: calls.append(a[1].size(0)) or addmm(*a, **k))
    return calls


@needs_fbgemm
def test_int8_outputs_stay_within_the_error_bound():
    """The certificate rests on |int8 output - exact output| <= step * l1 + ||x|| * dist."""
    layer = _layer()
    argmax = LinearArgmax(layer)
    for scale in (1.0, 5.0):  # tanh-like inputs and wider ones, some all positive
        for x in (torch.tanh(scale * torch.randn(50, 64)), scale * torch.rand(50, 64)):
            approx = torch.ops.quantized.linear_dynamic(x, argmax.packed, True)
            exact = (x.double() @ layer.weight.double().t() + layer.bias.double())
            step = (max(float(x.max()), 0.0) - min(float(x.min()), 0.0)) / 127
            bound = step * argmax.l1 + x.double().norm(dim=1, keepdim=True) * argmax.dist
            assert bool(((approx.double() - exact).abs() <= bound).all())


@needs_fbgemm
def test_certified_argmax_equals_the_float32_argmax_near_ties_too(monkeypatch):
    layer = _layer(seed=1)
    argmax = LinearArgmax(layer)
    x = torch.tanh(2 * torch.randn(300, 64))
    # Rows whose two best outputs are (nearly) tied cannot be certified: float32 decides them.
    w, b = layer.weight.detach(), layer.bias.detach()
    tie = torch.linalg.lstsq(torch.stack([w[3] - w[7]]), (b[7] - b[3]).view(1, 1)).solution.squeeze(1)
    x[:20] = 0.01 * x[:20] + tie  # y_3 == y_7 up to the small perturbation
    calls = _count_addmm_rows(monkeypatch)
    picked = argmax(x)
    monkeypatch.undo()
    assert torch.equal(picked, (x @ w.t() + b).max(dim=1).indices)
    assert calls and 0 < calls[0] < x.size(0)  # some rows fell back, most did not


@needs_fbgemm
def test_rows_the_candidates_cannot_certify_are_settled_by_the_outputs_within_reach(monkeypatch):
    layer = _layer(seed=4)
    with torch.no_grad():  # ten outputs 0.01 apart: closer than the int8 error bound, far above rounding
        layer.weight[:10] = layer.weight[0]
        layer.bias[:10] = layer.bias[0] - 0.01 * torch.arange(10.0)
    argmax = LinearArgmax(layer)
    x = torch.tanh(5 * layer.weight.detach()[0].expand(40, -1) + 0.1 * torch.randn(40, 64))
    calls = _count_addmm_rows(monkeypatch)
    picked = argmax(x)
    monkeypatch.undo()
    assert torch.equal(picked, (x @ layer.weight.detach().t() + layer.bias.detach()).max(dim=1).indices)
    assert argmax.unsure == 40 and not calls  # none certified by 4 candidates; none needed float32


@needs_fbgemm
def test_exactly_tied_outputs_go_to_the_first_as_float32_max_does():
    layer = _layer(seed=3)
    with torch.no_grad():
        layer.weight[7], layer.bias[7] = layer.weight[3], layer.bias[3]  # y_7 == y_3, always
    argmax = LinearArgmax(layer)
    x = torch.tanh(5 * layer.weight.detach()[3].expand(30, -1) + 0.1 * torch.randn(30, 64))
    picked = argmax(x)
    assert torch.equal(picked, (x @ layer.weight.detach().t() + layer.bias.detach()).max(dim=1).indices)
    assert bool((picked == 3).all())


@needs_fbgemm
def test_greedy_search_picks_the_same_pieces_with_the_certified_argmax():
    from conftest import tiny_model

    from nmt.data.batching import make_batch
    from nmt.inference.greedy import greedy_search

    model = tiny_model(vocab=30, seed=7).eval()
    batch = make_batch([[5, 6, 7, 8], [9], [10, 11, 12, 13, 14, 15, 16], [17, 5]] * 4)
    budget = torch.full((16,), 12)
    plain = greedy_search(model, batch.src, batch.src_len, budget, with_scores=False)
    fast = greedy_search(model, batch.src, batch.src_len, budget, with_scores=False,
                         argmax=LinearArgmax(model.generator.proj))
    assert [h.tokens for h in fast] == [h.tokens for h in plain]


@needs_fbgemm
def test_an_untrained_layer_soon_goes_float32_and_still_agrees():
    torch.manual_seed(2)
    layer = nn.Linear(256, 5648)  # PyTorch's init: many outputs, too close together to certify
    argmax = LinearArgmax(layer)
    x = torch.tanh(2 * torch.randn(400, 256))
    expected = (x @ layer.weight.detach().t() + layer.bias.detach()).max(dim=1).indices
    for start in list(range(0, 400, 100)) * 4:
        assert torch.equal(argmax(x[start:start + 100]), expected[start:start + 100])
    assert argmax.unsure > argmax.GIVE_UP[0] * argmax.rows  # it gave up...
    assert argmax.rows <= argmax.GIVE_UP[1] + 100  # ...and stopped counting: no int8 pass since


def test_only_float32_cpu_linear_layers_qualify():
    assert not LinearArgmax.available(nn.Linear(4, 4, bias=False))
    assert not LinearArgmax.available(nn.Linear(4, 4).double())


def test_a_diverged_model_falls_back_to_float32_instead_of_failing():
    # lr 1e30 in a 2-rank test made the decoder's outputs inf; int8 has no scale for them
    layer = nn.Linear(8, 20)
    argmax = LinearArgmax(layer)
    x = torch.randn(3, 8)
    x[1, 2] = float("inf")
    assert argmax(x).tolist()[0::2] == layer(x).argmax(1).tolist()[0::2]
    with torch.no_grad():
        layer.weight[0, 0] = float("nan")
    assert not LinearArgmax.available(layer)
