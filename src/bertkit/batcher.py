"""The server's dynamic micro-batching: concurrent requests' inputs grouped into forward passes.

    batcher = Batcher(model.run, max_batch_size=32, max_batch_tokens=16384, max_wait_ms=5)
    job = Job(inputs, tokens=model.count_tokens(inputs))
    batcher.add(job)                       # then await job.done (the server bounds how long it waits)

A group starts with the oldest waiting request and takes those queued behind it, in order, that fit beside it:
at most `max_batch_size` inputs and `max_batch_tokens` tokens in all. A request that does not fit leads the
next group, while shorter ones behind it may ride along in this one (a short request is not held back by
large ones queued before it; none waits more than a group longer than it would in order). A request larger
than the budget still runs, in a group of its own, cut into forward passes by the model. It waits up to `max_wait_ms` for more only
while requests come concurrently (the last group held several, or some arrived while it ran): a lone
client's request goes at once, since waiting could gain it no company, only latency. One group runs at a
time, in a worker thread, so the event loop keeps answering (health checks, refusals) meanwhile. A request
given up while still queued (its timeout passed) is skipped: it never runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("bertkit")


@dataclass(eq=False)
class Job:
    """One request's inputs on their way through the batcher; `done` gets its results, in order."""

    inputs: list[Any]
    tokens: int
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    queued: float = field(default_factory=time.perf_counter)
    state: str = "queued"  # queued -> running -> finished; or "dropped": given up while queued, never run


class Batcher:
    """Groups the inputs of concurrent jobs into calls of `run` (inputs -> one result each), one at a time."""

    def __init__(self, run: Callable[[list[Any]], list[Any]], max_batch_size: int, max_batch_tokens: int,
                 max_wait_ms: float, observe: Callable[[int], None] = lambda n: None):
        self.run_batch, self.max_batch_size, self.max_batch_tokens = run, max_batch_size, max_batch_tokens
        self.max_wait, self.observe = max_wait_ms / 1000, observe
        self.waiting: deque[Job] = deque()
        self.arrived = asyncio.Event()
        self.crowded = False  # requests came concurrently lately: worth waiting for company
        self.running_tokens = 0
        self.seconds_per_token: float | None = None  # measured on the groups run so far (a moving average)

    def backlog(self) -> float:
        """Seconds the work queued and running will take, at the pace measured so far (0 before any is measured)."""
        queued = sum(job.tokens for job in self.waiting if job.state == "queued") + self.running_tokens
        return queued * (self.seconds_per_token or 0.0)

    def add(self, job: Job) -> None:
        self.waiting.append(job)
        self.arrived.set()

    def drop(self, job: Job) -> bool:
        """Gives up a job that has not started (it will never run); tells whether it had not."""
        if job.state != "queued":
            return False
        job.state = "dropped"
        return True

    async def run(self) -> None:
        """Runs groups until cancelled."""
        while True:
            group = await self._group()
            await self._answer(group)
            self.crowded = len(group) > 1 or bool(self.waiting)

    def _next(self) -> Job | None:
        while self.waiting and self.waiting[0].state == "dropped":
            self.waiting.popleft()
        return self.waiting[0] if self.waiting else None

    async def _group(self) -> list[Job]:
        """The next group: the oldest job, and the jobs queued behind it that fit beside it (a job that does not
        fit stays at the head of the queue: it leads the next group), waiting for company while crowded."""
        while self._next() is None:
            self.arrived.clear()
            await self.arrived.wait()
        group = [self.waiting.popleft()]
        size, tokens = len(group[0].inputs), group[0].tokens
        deadline = time.perf_counter() + (self.max_wait if self.crowded else 0.0)
        while size < self.max_batch_size:
            fits = [job for job in self.waiting if job.state == "queued" and size + len(job.inputs) <= self.max_batch_size
                    and tokens + job.tokens <= self.max_batch_tokens]
            for job in fits:  # in order, while they still fit
                if size + len(job.inputs) <= self.max_batch_size and tokens + job.tokens <= self.max_batch_tokens:
                    self.waiting.remove(job)
                    group.append(job)
                    size, tokens = size + len(job.inputs), tokens + job.tokens
            left = deadline - time.perf_counter()
            if left <= 0 or size >= self.max_batch_size:
                break
            self.arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), left)
        for job in group:
            job.state = "running"
        return group

    async def _answer(self, group: list[Job]) -> None:
        inputs = [item for job in group for item in job.inputs]
        self.observe(len(inputs))
        self.running_tokens = sum(job.tokens for job in group)
        t0 = time.perf_counter()
        try:
            results = await asyncio.to_thread(self.run_batch, inputs)
            pace = (time.perf_counter() - t0) / max(self.running_tokens, 1)
            self.seconds_per_token = pace if self.seconds_per_token is None else 0.8 * self.seconds_per_token + 0.2 * pace
        except Exception as e:  # the model failed: every job of the group hears it
            for job in group:
                job.state = "finished"
                if not job.done.done():
                    job.done.set_exception(e)
            return
        finally:
            self.running_tokens = 0
        at = 0
        for job in group:
            job.state = "finished"
            if not job.done.done():  # the client may have gone
                job.done.set_result(results[at : at + len(job.inputs)])
            at += len(job.inputs)
