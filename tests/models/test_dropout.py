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


def test_relu_dropout_equals_dropout_after_relu_in_value_and_gradient():
    from nmt.models.dropout import dropout_mask, relu_dropout

    x = torch.randn(64, 48)
    x[0, :4] = 0.0  # relu's kink: no gradient there, as torch.relu has none
    fused, plain = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(5)
    out = relu_dropout(fused, 0.3, training=True)
    torch.manual_seed(5)
    expected = torch.relu(plain) * dropout_mask(plain.shape, 0.3, plain)  # the same draws
    assert torch.equal(out, expected)
    weights = torch.randn(64, 48)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    assert torch.equal(fused.grad, plain.grad)
    assert torch.equal(relu_dropout(x, 0.3, training=False), torch.relu(x))


def test_dropout_keeps_a_bool_mask_for_backward():
    x = torch.randn(32, 16, requires_grad=True)
    y = dropout(x, 0.2, training=True)
    saved = y.grad_fn.saved_tensors
    assert len(saved) == 1 and saved[0].dtype == torch.bool
