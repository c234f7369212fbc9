"""The machine and the file system: devices and CPU threads (``devices``), safe writes
(``fileio``), one writer per run directory (``lock``) and the checkpoint format
(``checkpoint``).

May import: ``nmt.errors`` and each other; nothing of configs, data, models, training or
the CLI.
"""
