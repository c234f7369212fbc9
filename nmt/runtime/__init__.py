"""The machine and the file system: devices and CPU threads (``devices``), safe writes
(``fileio``), one writer per run directory (``lock``), the checkpoint format
(``checkpoint``) and the mean of several (``averaging``), precisions (``precision``), a run's weights files by name (``weights``),
the allocator (``allocator``).

May import: ``nmt.errors`` and each other; nothing of configs, data, models, training or
the CLI.
"""
