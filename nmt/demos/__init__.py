"""``nmt demo``: the d2l.ai attention chapter's experiments, run on the modules nmt translates
with. One module per experiment (``pooling``, ``scoring``, ``bahdanau``, ``multihead``,
``positions``), each computing a :class:`nmt.demos.gallery.Demo` result: the numbers to print,
the properties its test checks, and the figure's panels (:mod:`nmt.report.panels` draws them);
``gallery`` lists them.

May import anything below the CLI.
"""
