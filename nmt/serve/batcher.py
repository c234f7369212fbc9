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
from functools import partial
from typing import Any, TypeVar

from nmt.api import ExportedModel, Model, Translation
from nmt.errors import NmtError
from nmt.inference.settings import SearchOptions

log = logging.getLogger(__name__)
T = TypeVar("T")


class Busy(NmtError):
    """More work is waiting than the service queues: the client should retry later."""


def rows_per_line(options: SearchOptions) -> int:
    """The decoder rows a line takes: the beam's, or one per sample."""
    return options.nbest if options.sampling is not None else options.beam


def work(lines: list[str], beam: int) -> int:
    """What decoding ``lines`` with ``beam`` rows each weighs in the queue: their characters
    times the beam.
    Decoding time follows a line's source pieces (its output's length follows them too) and the
    beam; a piece covers one character or more, so characters bound the pieces without
    tokenizing on the event loop."""
    return beam * sum(len(line) for line in lines)


# An /attention call costs 6-9 times what a batched line costs a character: it decodes alone, then
# builds every layer's and head's map and their JSON (measured, docs/serving.md)
ATTENTION_WEIGHT = 8


def attention_work(text: str, beam: int) -> int:
    """What an /attention call on ``text`` with ``beam`` weighs in the queue."""
    return ATTENTION_WEIGHT * work([text], beam)


@dataclass
class _Job:
    """A request's lines, to be decoded in a batch."""

    lines: list[str]
    key: SearchOptions  # jobs decoded together share it
    future: asyncio.Future
    arrived: float  # loop time

    @property
    def lines_waiting(self) -> int:
        return len(self.lines)

    @property
    def work(self) -> int:
        return work(self.lines, rows_per_line(self.key))


@dataclass
class _Call:
    """A function to run on the worker between batches (an /attention request)."""

    run: Callable[[], Any]
    work: int
    future: asyncio.Future
    lines_waiting = 1


class Batcher:
    """Queues translation requests and decodes them in batches on one worker thread.

    A batch starts ``wait_s`` after the later of its first request's arrival and the previous
    batch's end (or at once when ``max_lines`` lines with its settings wait), and takes the
    waiting requests with the same search settings, up to ``max_lines`` lines (a larger request
    goes alone). Calls of :meth:`call` run between batches. Nothing queues on the worker itself:
    a request or call is handed to it only when it is free, so one cancelled while it waits (its
    client gone, or its timeout passed) is never run. Requests and calls wait while their
    :func:`work` totals at most ``max_work``; beyond that :class:`Busy`, unless nothing waits (so
    any request the limits allow can be answered). Calls hold at most half of ``max_work``, so
    that clients who keep asking for them cannot leave translations no room.
    """

    def __init__(self, model: Model | ExportedModel, wait_s: float, max_lines: int, max_work: int) -> None:
        self.model, self.wait_s, self.max_lines, self.max_work = model, wait_s, max_lines, max_work
        self.batches = 0
        self._jobs: list[_Job] = []  # waiting, oldest first
        self._calls: list[_Call] = []  # waiting, oldest first
        self._current: list[_Job | _Call] = []  # on the worker: a batch or a call
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

    def _pending(self) -> list[_Job | _Call]:
        return [item for item in self._calls + self._jobs + self._current if not item.future.done()]

    @property
    def waiting(self) -> int:
        """Lines queued or being decoded, a call counting as one."""
        return sum(item.lines_waiting for item in self._pending())

    @property
    def work(self) -> int:
        """The :func:`work` of the requests and calls queued or on the worker."""
        return sum(item.work for item in self._pending())

    def _check_room(self, amount: int) -> None:
        if self._task is None or self._task.done():
            raise Busy("the service is not decoding (it is shutting down)")
        queued = self.work
        if queued and queued + amount > self.max_work:
            raise Busy(f"the service is busy: {queued:,} characters x beam are waiting, and this request's "
                       f"{amount:,} would pass its limit of {self.max_work:,}; retry later")

    async def translate(self, lines: list[str], options: SearchOptions) -> list[list[Translation]]:
        """The translations ``options`` asks for of each line, decoded with other requests'
        lines of the same options; a sampled request alone, so that its lines' draws are
        numbered as its own (:mod:`nmt.inference.sampling`) and its seed gives the same answer
        whoever else is waiting."""
        self._check_room(work(lines, rows_per_line(options)))
        loop = asyncio.get_running_loop()
        job = _Job(lines, options, loop.create_future(), loop.time())
        self._jobs.append(job)
        self._arrival.set()
        return await job.future

    async def call(self, amount: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the model's worker thread, between batches; it weighs ``amount`` of
        :func:`work` in the queue."""
        self._check_room(amount)
        calls = sum(item.work for item in self._pending() if isinstance(item, _Call))
        if calls and calls + amount > self.max_work // 2:
            raise Busy(f"the service is busy: /attention requests of {calls:,} characters x beam x "
                       f"{ATTENTION_WEIGHT} are waiting, and they may hold at most half its queue; retry later")
        call = _Call(partial(fn, *args), amount, asyncio.get_running_loop().create_future())
        self._calls.append(call)
        self._arrival.set()
        return await call.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Cancelled while they waited: timed out, or their clients left
            self._jobs = [job for job in self._jobs if not job.future.done()]
            self._calls = [call for call in self._calls if not call.future.done()]
            if self._calls:
                await self._run_call(self._calls.pop(0))
                continue
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
                try:  # woken by each arrival, to start at once when the batch is full or a call comes
                    await asyncio.wait_for(self._arrival.wait(), delay)
                except TimeoutError:
                    pass
                continue
            await self._decode(self._take())
            self._last_end = loop.time()

    def _stopped(self, task: asyncio.Task) -> None:
        """However batching ended, no request waits for it in vain."""
        error: Exception = Busy("the service is shutting down")
        if not task.cancelled() and task.exception() is not None:
            log.error("the batcher failed", exc_info=task.exception())
            error = Busy("the service's batcher failed; the log has the details")
        for item in self._pending():
            item.future.set_exception(error)

    def _take(self) -> list[_Job]:
        """The oldest job and the waiting jobs with its settings, up to ``max_lines`` lines."""
        first, lines = self._jobs[0], 0
        batch = []
        for job in self._jobs:
            if job.key == first.key and (not batch or (lines + len(job.lines) <= self.max_lines
                                                        and first.key.sampling is None)):
                batch.append(job)
                lines += len(job.lines)
        taken = {id(job) for job in batch}
        self._jobs = [job for job in self._jobs if id(job) not in taken]
        return batch

    async def _decode(self, batch: list[_Job]) -> None:
        options = batch[0].key
        lines = [line for job in batch for line in job.lines]
        self.batches += 1
        try:
            run = partial(self.model.translate, lines, options.beam, options.nbest, options.length_penalty,
                          sampling=options.sampling)
            results = await self._on_worker(batch, run)
        except Exception as e:  # each request gets the error; the service goes on
            for job in batch:
                _settle(job.future, error=e)
            return
        start = 0
        for job in batch:
            _settle(job.future, results[start:start + len(job.lines)])
            start += len(job.lines)

    async def _run_call(self, call: _Call) -> None:
        try:
            result = await self._on_worker([call], call.run)
        except Exception as e:  # the request gets the error; the service goes on
            _settle(call.future, error=e)
        else:
            _settle(call.future, result)

    async def _on_worker(self, items: list[_Job] | list[_Call], run: Callable[[], T]) -> T:
        """``run()`` on the worker thread, for ``items``. Left set if cancelled (the service
        stops), ``_current`` tells :meth:`_stopped` whom to answer."""
        self._current = list(items)
        result = await asyncio.get_running_loop().run_in_executor(self._worker, run)
        self._current = []
        return result


def _settle(future: asyncio.Future, result: Any = None, error: Exception | None = None) -> None:
    """Give ``future`` its result or error, unless it has one (its request timed out or left)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
