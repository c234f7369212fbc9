"""The models, knowing nothing of files, metrics or the CLI.

``interface`` is what every model family implements and the rest of nmt may ask of a model;
``build`` makes one from its config. The parts families share: attention scoring
(``attention``), masks, dropout, per-side piece tables (``pieces``), the output layer
(``generator``) and its loss (``loss``), and the switch for the hand-written CPU paths
(``kernels``). Each family is a sub-package: ``rnn`` (GRU encoder, attention GRU decoders,
backward through time by hand).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.data.tokenizer`` (the special ids) and
each other.
"""
