"""Text in, ids out: reading and normalising corpora, plain or gzipped, a line at a time
(``corpus``), the grouped held-out split (``split``), bounded random samples (``sampling``),
SentencePiece (``tokenizer``, which also fixes the special ids), encoded sequences stored flat
on disk (``store``), what prepared data holds and came from (``manifest``), where a corpus's
text comes from (``sources``), the passes that prepare it (``passes``), prepared data's
directories and a run's view of them (``prepare``), and padded, length-bucketed batches
(``batching``).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime`` and each other; nothing of models,
training or the CLI.
"""
