import torch

from nmt.models.dropout import Dropout, dropout


def test_drops_about_p_and_keeps_the_expectation():
    torch.manual_seed(0)
    y = dropout(torch.ones(400, 1000), 0.2, training=True)
    assert abs((y == 0).float().mean().item() - 0.2) < 0.005
    assert abs(y.mean().item() - 1.0) < 0.01
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept, 32768 / (32768 - 6554)))


def test_every_element_gets_its_own_draw():
    torch.manual_seed(0)
    y = dropout(torch.ones(7, 5, 3), 0.5, training=True)  # odd size: the last 64-bit draw is cut
    assert y.shape == (7, 5, 3)
    assert 0 < (y == 0).sum() < y.numel()
    # Neighbouring elements come from different 15-bit chunks, so they are not equal in lockstep.
    torch.manual_seed(0)
    big = dropout(torch.ones(100_000), 0.5, training=True) == 0
    assert abs((big[0::4] & big[1::4]).float().mean().item() - 0.25) < 0.01


def test_eval_and_zero_p_are_the_identity():
    x = torch.randn(4, 8)
    assert dropout(x, 0.2, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    module = Dropout(0.3).eval()
    assert module(x) is x


def test_same_seed_same_mask_and_gradient_is_the_mask():
    x = torch.randn(32, 16, requires_grad=True)
    torch.manual_seed(3)
    a = dropout(x, 0.2, training=True)
    torch.manual_seed(3)
    b = dropout(x, 0.2, training=True)
    assert torch.equal(a, b)
    a.sum().backward()
    assert torch.allclose(x.grad, a.detach() / x.detach())
