"""What people look at: figures drawn with matplotlib (``plotting``: attention heatmaps,
training curves; ``panels``: the demos' curves and heatmaps) and the training progress
display (``progress``).

May import: ``nmt.errors`` and ``nmt.runtime``; nothing of models, training or the CLI.
"""
