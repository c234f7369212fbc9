"""The Transformer family (Vaswani et al. 2017), built from the seed's blocks: multi-head
attention over :func:`nmt.models.attention.scaled_dot_product` (``multihead``), sinusoidal
positional encoding (``positional``), and the position-wise feed-forward and residual
sub-layer (``layers``).

May import: ``nmt.config``, ``nmt.errors`` and ``nmt.models``' shared parts.
"""
