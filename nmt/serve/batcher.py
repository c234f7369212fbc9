"""Dynamic batching: requests that arrive within a few milliseconds of each other are decoded
as one batch, so that a service under concurrent load decodes as a batch translation does.

The model runs on one worker thread: a call already spreads over the CPU's cores, and one at a
time keeps memory flat. The event loop only queues, groups and hands out results.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from nmt.api import Model, Translation
from nmt.errors import NmtError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Busy(NmtError):
    """More lines are waiting than the service queues: the client should retry later."""


@dataclass
class _Job:
    lines: list[str]
    key: tuple[int, int, float]  # beam, nbest, length penalty: jobs decoded together share it
    future: asyncio.Future
    arrived: float  # loop time


class Batcher:
    """Queues translation requests and decodes them in batches on one worker thread.

    A batch starts ``wait_s`` after the later of its first request's arrival and the previous
    batch's end (or at once when ``max_lines`` lines with its settings wait), and takes the waiting requests
    with the same search settings, up to ``max_lines`` lines (a larger request goes alone).
    Requests that arrive while a batch is decoded wait for the next one. At most
    ``max_queue`` lines wait, a call of :meth:`call` counting as one; beyond that
    :class:`Busy`.
    """

    def __init__(self, model: Model, wait_s: float, max_lines: int, max_queue: int) -> None:
        self.model, self.wait_s, self.max_lines, self.max_queue = model, wait_s, max_lines, max_queue
        self.batches = 0  # decoded so far: for /info and the tests
        self._jobs: list[_Job] = []
        self._current: list[_Job] = []  # the batch being decoded
        self._calls = 0  # calls waiting for or running on the worker
        self._arrival = asyncio.Event()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="nmt-decode")
        self._task: asyncio.Task | None = None
        self._last_end = 0.0  # when the previous batch was answered (loop time)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(self._stopped)

    async def stop(self) -> None:
        """Stop batching and release the worker. uvicorn answers the requests in flight
        before the application shuts down; any still waiting (past its graceful timeout) get
        :class:`Busy`."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self._worker.shutdown)

    @property
    def waiting(self) -> int:
        """Lines queued or being decoded, and calls waiting for the worker."""
        jobs = (job for job in self._jobs + self._current if not job.future.done())
        return sum(len(job.lines) for job in jobs) + self._calls

    def _check_room(self, lines: int) -> None:
        if self._task is None or self._task.done():
            raise Busy("the service is not decoding (it is shutting down)")
        waiting = self.waiting
        if waiting + lines > self.max_queue:
            raise Busy(f"the service is busy: {waiting} lines are waiting; retry later")

    async def translate(self, lines: list[str], beam: int, nbest: int, length_penalty: float
                        ) -> list[list[Translation]]:
        """The ``nbest`` best translations of each line, decoded with other requests' lines."""
        self._check_room(len(lines))
        loop = asyncio.get_running_loop()
        job = _Job(lines, (beam, nbest, length_penalty), loop.create_future(), loop.time())
        self._jobs.append(job)
        self._arrival.set()
        return await job.future

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the model's worker thread, between batches; it counts as one line
        waiting."""
        self._check_room(1)
        self._calls += 1
        try:
            return await self._on_worker(fn, *args)
        finally:
            self._calls -= 1

    async def _on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._jobs = [job for job in self._jobs if not job.future.done()]  # timed out or gone
            if not self._jobs:
                self._arrival.clear()
                await self._arrival.wait()
                continue
            # Counting from the previous batch's end too lets the clients it answered come back
            # and join: closed-loop clients otherwise split into two half-size batches for good.
            first = self._jobs[0]
            delay = max(first.arrived, self._last_end) + self.wait_s - loop.time()
            if delay > 0 and sum(len(job.lines) for job in self._jobs if job.key == first.key) < self.max_lines:
                self._arrival.clear()
                try:  # woken by each arrival, to start at once when the batch is full
                    await asyncio.wait_for(self._arrival.wait(), delay)
                except TimeoutError:
                    pass
                continue
            self._current = self._take()
            await self._decode(self._current)
            self._current = []
            self._last_end = loop.time()

    def _stopped(self, task: asyncio.Task) -> None:
        """However batching ended, no request waits for it in vain."""
        error: Exception = Busy("the service is shutting down")
        if not task.cancelled() and task.exception() is not None:
            log.error("the batcher failed", exc_info=task.exception())
            error = Busy("the service's batcher failed; the log has the details")
        for job in self._jobs + self._current:
            if not job.future.done():
                job.future.set_exception(error)

    def _take(self) -> list[_Job]:
        """The oldest job and the waiting jobs with its settings, up to ``max_lines`` lines."""
        first, lines = self._jobs[0], 0
        batch = []
        for job in self._jobs:
            if job.key == first.key and (not batch or lines + len(job.lines) <= self.max_lines):
                batch.append(job)
                lines += len(job.lines)
        taken = {id(job) for job in batch}
        self._jobs = [job for job in self._jobs if id(job) not in taken]
        return batch

    async def _decode(self, batch: list[_Job]) -> None:
        beam, nbest, length_penalty = batch[0].key
        lines = [line for job in batch for line in job.lines]
        self.batches += 1
        try:
            results = await self._on_worker(self.model.translate, lines, beam, nbest, length_penalty)
        except Exception as e:  # each request gets the error; the service goes on
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(e)
            return
        start = 0
        for job in batch:
            if not job.future.done():
                job.future.set_result(results[start:start + len(job.lines)])
            start += len(job.lines)
