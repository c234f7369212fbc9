import torch

from nmt.models.masks import lengths_to_mask


def test_lengths_to_mask_marks_real_positions():
    mask = lengths_to_mask(torch.tensor([3, 1, 0]), max_len=4)
    assert mask.tolist() == [[True, True, True, False], [True, False, False, False],
                             [False, False, False, False]]


def test_lengths_to_mask_defaults_to_longest():
    assert lengths_to_mask(torch.tensor([2, 5])).shape == (2, 5)
