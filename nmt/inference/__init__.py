"""Using a trained model: loading a run (``loading``), the search settings' checks that every
front end shares (``settings``), greedy and beam search over the model interface (``search``,
``beam``), exact fast top-k and argmax (``argmax``), raw text to translations
(``translate``), int8 weights (``quantize``), and scoring with sacrebleu (``evaluate``,
``metrics``).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime``, ``nmt.data``, ``nmt.models``.
"""
