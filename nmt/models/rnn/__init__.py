"""The GRU family: a packed bidirectional GRU encoder (``encoder``), two attention GRU
decoders (``decoders``), the GRU cell written once (``gru_cell``), backward through time by
hand for CPU training (``bptt``), and the encoder-decoder they make (``seq2seq``).

May import: ``nmt.config``, ``nmt.errors`` and ``nmt.models``' shared parts.
"""
