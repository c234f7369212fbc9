"""Is system B really better than system A? ``nmt compare``'s parts: the paired significance
tests and confidence intervals over sacreBLEU (``significance``), what a system is and its
hypotheses decoded once and cached in its run (``systems``, ``cache``), the sentences where
systems differ most (``differences``) and the page that shows them (``page``).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime``, ``nmt.data``, ``nmt.inference``, ``nmt.export``.
"""
