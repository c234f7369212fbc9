"""Text in, ids out: reading and normalising corpora and the grouped held-out split
(``corpus``), SentencePiece (``tokenizer``, which also fixes the special ids), the encoded
corpus stored flat (``sequences``), padded and length-bucketed batches (``batching``), and a
run's prepared data (``prepare``).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime`` and each other; nothing of models,
training or the CLI.
"""
