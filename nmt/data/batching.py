"""Padded batches with valid lengths, and length-bucketed batch order."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """One padded batch. Sources end in EOS; targets are shifted for teacher forcing.

    src: shape (batch, src_len); src_len: shape (batch,)
    tgt_in: BOS + target, shape (batch, tgt_len); tgt_out: target + EOS, shape (batch, tgt_len)
    tgt_mask: True at real target positions, shape (batch, tgt_len)
    """

    src: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor | None = None
    tgt_out: torch.Tensor | None = None
    tgt_mask: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        """Real target tokens, the loss normaliser."""
        return int(self.tgt_mask.sum()) if self.tgt_mask is not None else 0

    def to(self, device: torch.device) -> Batch:
        """Copy to ``device``; to CUDA through pinned memory without blocking the host."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or t.device == device:
                return t
            if device.type == "cuda":
                return t.pin_memory().to(device, non_blocking=True)
            return t.to(device)
        return Batch(move(self.src), move(self.src_len), move(self.tgt_in), move(self.tgt_out),
                     move(self.tgt_mask))


def _pad(seqs: list[list[int]], prefix: list[int], suffix: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) + len(prefix) + len(suffix) for s in seqs])
    out = torch.full((len(seqs), int(lengths.max())), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, :lengths[row]] = torch.tensor(prefix + seq + suffix, dtype=torch.long)
    return out, lengths


def make_batch(src: list[list[int]], tgt: list[list[int]] | None = None) -> Batch:
    """Pad piece-id sequences (without specials) into a :class:`Batch`."""
    src_t, src_len = _pad(src, [], [EOS_ID])
    if tgt is None:
        return Batch(src_t, src_len)
    tgt_in, tgt_len = _pad(tgt, [BOS_ID], [])
    tgt_out, _ = _pad(tgt, [], [EOS_ID])
    tgt_mask = torch.arange(tgt_in.size(1)).unsqueeze(0) < tgt_len.unsqueeze(1)
    return Batch(src_t, src_len, tgt_in, tgt_out, tgt_mask)


def bucket_batches(src_lens: list[int], tgt_lens: list[int], batch_size: int,
                   batch_tokens: int | None, rng: random.Random) -> list[list[int]]:
    """Group example indices into batches of similar lengths, in a shuffled order.

    A random permutation breaks ties before sorting by (target, source) length, so batch
    contents differ each epoch while padding stays minimal. Target first: the decoder steps
    over every row to the longest target, while the packed encoder never computes at source
    padding (on fra-eng, 0.3% target padding instead of 3.3%; in-process A/B, 1.3% more
    target pieces per second). Every index appears exactly once.
    With ``batch_tokens``, a batch holds as many sentences as keep
    ``sentences * longest target`` within the budget; otherwise ``batch_size`` sentences.
    """
    order = list(range(len(src_lens)))
    rng.shuffle(order)
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        longest_if_added = max(longest, tgt_lens[i] + 1)
        full = (len(current) >= batch_size if batch_tokens is None
                else longest_if_added * (len(current) + 1) > batch_tokens)
        if current and full:
            batches.append(current)
            current, longest_if_added = [], tgt_lens[i] + 1
        current.append(i)
        longest = longest_if_added
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def padded_pieces(index: list[int], src_lens: list[int], tgt_lens: list[int]) -> int:
    """Source and target positions of ``index``'s padded batch, EOS and BOS included."""
    return len(index) * (max(src_lens[i] for i in index) + max(tgt_lens[i] for i in index) + 2)


def split_passes(index: list[int], src_lens: list[int], tgt_lens: list[int], max_pieces: int) -> list[list[int]]:
    """``index`` in as few consecutive, near-equal parts as keep each one's :func:`padded_pieces`
    within ``max_pieces`` (0: no limit), a single sentence being the smallest part.

    The parts' gradients, each weighted by the whole batch's token count, add up to the batch's:
    a long batch runs in several forward passes, and holds that much less for backward.
    """
    if not max_pieces:
        return [index]
    for parts in range(1, len(index) + 1):
        size = -(-len(index) // parts)
        chunks = [index[k:k + size] for k in range(0, len(index), size)]
        if all(padded_pieces(c, src_lens, tgt_lens) <= max_pieces for c in chunks):
            return chunks
    return [[i] for i in index]


def length_sorted_chunks(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices in batches of similar length, for inference; the caller restores the order."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
