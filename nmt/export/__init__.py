"""Into production through CTranslate2: a Transformer run's weights as a CTranslate2 model
(``converter``), the exported directory and its manifest (``exported``), and translation with
CTranslate2 under nmt's own input and output contract (``engine``). ctranslate2 is an
optional extra (``pip install -e ".[export]"``), imported only here and only when used.

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime``, ``nmt.data``, ``nmt.models``,
``nmt.inference``.
"""
