"""nmt: neural machine translation with a GRU encoder and a Bahdanau-attention decoder."""
__version__ = "0.1.0"
