import pytest
import torch
import torch.nn.functional as F

from nmt.models import loss as loss_module
from nmt.models.generator import Generator
from nmt.models.loss import masked_cross_entropy
from nmt.models.masks import lengths_to_mask


def test_padding_contributes_nothing_to_loss_or_gradient():
    torch.manual_seed(0)
    generator = Generator(8, 11, dropout=0.0)
    outputs = torch.randn(2, 4, 8, requires_grad=True)
    tgt = torch.randint(0, 11, (2, 4))
    mask = lengths_to_mask(torch.tensor([4, 2]), 4)
    loss = masked_cross_entropy(generator, outputs, tgt, mask)
    loss.backward()
    assert torch.all(outputs.grad[1, 2:] == 0)

    changed = outputs.detach().clone()
    changed[1, 2:] = 1e3
    tgt2 = tgt.clone()
    tgt2[1, 2:] = 3
    torch.testing.assert_close(masked_cross_entropy(generator, changed, tgt2, mask), loss.detach())


def test_loss_is_the_sum_over_real_tokens():
    torch.manual_seed(1)
    generator = Generator(3, 5, dropout=0.0)
    outputs, tgt = torch.randn(1, 3, 3), torch.tensor([[1, 2, 4]])
    mask = lengths_to_mask(torch.tensor([2]), 3)
    expected = torch.nn.functional.cross_entropy(generator(outputs[0, :2]), tgt[0, :2], reduction="sum")
    torch.testing.assert_close(masked_cross_entropy(generator, outputs, tgt, mask), expected)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("scale", [1.0, 0.37])  # backward's upstream gradient is not always 1
@pytest.mark.parametrize("slice_tokens", [None, 4])  # one slice; slices of 4 of the 9 tokens
def test_fused_loss_and_gradients_match_torch_cross_entropy(smoothing, scale, slice_tokens, monkeypatch):
    if slice_tokens:
        monkeypatch.setattr(loss_module, "_SLICE_ELEMENTS", 13 * slice_tokens)
    torch.manual_seed(2)
    generator = Generator(6, 13, dropout=0.0)
    outputs = torch.randn(3, 5, 6, dtype=torch.float64)
    generator.double()
    tgt = torch.randint(0, 13, (3, 5))
    mask = lengths_to_mask(torch.tensor([5, 3, 1]), 5)

    def run(loss_fn):
        x = outputs.clone().requires_grad_(True)
        generator.zero_grad()
        loss = loss_fn(x) * scale
        loss.backward()
        return loss.detach(), x.grad, generator.proj.weight.grad.clone(), generator.proj.bias.grad.clone()

    fused = run(lambda x: masked_cross_entropy(generator, x, tgt, mask, smoothing))
    reference = run(lambda x: F.cross_entropy(generator.proj(x[mask]), tgt[mask], reduction="sum",
                                              label_smoothing=smoothing))
    for got, want in zip(fused, reference):
        torch.testing.assert_close(got, want)


def _extreme_generator(case: str) -> tuple[Generator, torch.Tensor]:
    """A float32 generator over 4 pieces whose exp, unshifted, would overflow or lose a winner:
    'logits': two tokens' logits reach +-200; 'bias': piece 1's bias sits 100 below piece 0's,
    yet its logit wins by 10, so e^(b - max b) would be a denormal."""
    generator = Generator(3, 4, dropout=0.0)
    unit = torch.tensor([1.0, 0.0, 0.0])
    with torch.no_grad():
        if case == "logits":
            generator.proj.weight.copy_(torch.tensor([[200.0, 0, 0], [-200, 0, 0], [0, 1, 0], [0, 0, 1]]))
            generator.proj.bias.zero_()
        else:
            generator.proj.weight.copy_(torch.stack([-55 * unit, 55 * unit, 0 * unit, 0 * unit]))
            generator.proj.bias.copy_(torch.tensor([100.0, 0.0, 0.0, 0.0]))
    return generator, torch.stack([unit, -unit]).unsqueeze(0)  # (batch 1, 2 steps, hidden 3)


@pytest.mark.parametrize("case", ["logits", "bias"])
def test_loss_stays_exact_where_unshifted_exp_would_overflow_or_underflow(case, monkeypatch):
    monkeypatch.setattr(loss_module, "_SLICE_ELEMENTS", 4)  # a token a slice: each its own shift
    generator, outputs = _extreme_generator(case)
    tgt, mask = torch.tensor([[1, 1]]), torch.ones(1, 2, dtype=torch.bool)
    fused = masked_cross_entropy(generator, outputs, tgt, mask, 0.1)
    reference = F.cross_entropy(generator.proj(outputs[0]), tgt[0], reduction="sum", label_smoothing=0.1)
    assert torch.isfinite(fused)
    torch.testing.assert_close(fused, reference)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_loss_under_autocast_stays_finite_and_close_to_float32(dtype):
    # the bound is 37.6 (inside float32's 60) and the largest logit 18: e^18 overflows float16
    torch.manual_seed(0)
    generator = Generator(8, 5, dropout=0.0)
    with torch.no_grad():
        generator.proj.weight.copy_(torch.randn(5, 8) * 2)
    outputs = torch.randn(1, 6, 8).tanh() * 2
    tgt, mask = torch.randint(0, 5, (1, 6)), torch.ones(1, 6, dtype=torch.bool)

    def run(**autocast):
        x = outputs.clone().requires_grad_(True)
        generator.zero_grad()
        with torch.autocast("cpu", **autocast):
            loss = masked_cross_entropy(generator, x, tgt, mask, 0.1)
        loss.backward()
        return loss.detach().float(), x.grad.float(), generator.proj.weight.grad

    mixed, full = run(dtype=dtype), run(enabled=False)
    for got, want in zip(mixed, full):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=0.05, atol=0.05 * want.abs().max().item())


def test_a_batch_without_real_tokens_has_zero_loss_and_gradient():
    generator = Generator(4, 7, dropout=0.0)
    outputs = torch.randn(2, 3, 4, requires_grad=True)
    loss = masked_cross_entropy(generator, outputs, torch.zeros(2, 3, dtype=torch.long),
                                torch.zeros(2, 3, dtype=torch.bool), 0.1)
    loss.backward()
    assert loss.item() == 0 and not outputs.grad.any() and not generator.proj.weight.grad.any()


def test_loss_keeps_no_vocab_by_tokens_matrix_for_backward(monkeypatch):
    monkeypatch.setattr(loss_module, "_SLICE_ELEMENTS", 50 * 8)
    generator = Generator(6, 50, dropout=0.0)
    outputs = torch.randn(4, 10, 6, requires_grad=True)
    tgt, mask = torch.randint(0, 50, (4, 10)), torch.ones(4, 10, dtype=torch.bool)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        loss = masked_cross_entropy(generator, outputs, tgt, mask, 0.1)
    assert saved and max(torch.Size(s).numel() for s in saved) <= 50 * 6  # (vocab, hidden) at most
    loss.backward()
    with torch.no_grad():  # validation: the loss alone, the same value
        torch.testing.assert_close(masked_cross_entropy(generator, outputs, tgt, mask, 0.1), loss.detach())
