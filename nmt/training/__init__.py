"""Training: the loop and validation (``trainer``), learning-rate schedules (``schedule``), the
warnings a run starts with (``advice``), starting and resuming a run in its directory
(``runs``), what a training process shows and writes (``run_writer``), and several processes
(``distributed``) with their launcher (``launch``).

May import: ``nmt.errors``, ``nmt.config``, ``nmt.runtime``, ``nmt.report``, ``nmt.data``,
``nmt.models``, ``nmt.inference`` (validation translates).
"""
