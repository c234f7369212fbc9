import torch

from nmt.loss import masked_cross_entropy
from nmt.masks import lengths_to_mask


def test_padding_contributes_nothing_to_loss_or_gradient():
    torch.manual_seed(0)
    generator = torch.nn.Linear(8, 11)
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
    generator = torch.nn.Linear(3, 5)
    outputs, tgt = torch.randn(1, 3, 3), torch.tensor([[1, 2, 4]])
    mask = lengths_to_mask(torch.tensor([2]), 3)
    expected = torch.nn.functional.cross_entropy(generator(outputs[0, :2]), tgt[0, :2], reduction="sum")
    torch.testing.assert_close(masked_cross_entropy(generator, outputs, tgt, mask), expected)
