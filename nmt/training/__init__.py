"""Training: the loop and validation (``trainer``), learning-rate schedules (``schedule``), starting and resuming a run in
its directory (``runs``), and what a training process shows and writes (``run_writer``).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime``, ``nmt.report``, ``nmt.data``,
``nmt.models``, ``nmt.inference`` (validation translates).
"""
