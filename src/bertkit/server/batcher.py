"""The server's dynamic micro-batching: concurrent requests grouped into forward passes.

    batcher = Batcher(run, max_batch_size=32, max_batch_tokens=16384, max_wait_ms=5)
    job = Job(work, tokens=prepared.tokens, size=prepared.size)
    batcher.add(job)                       # then await job.done (the server bounds how long it waits)

A job is one request's work, already read and tokenized (`work`, opaque here), with its inputs (`size`) and
tokens; `run` takes the works of a group and gives one result per job (an exception: that job's failure).
A group starts with the oldest waiting job and takes those queued behind it, in order, that fit beside it:
at most `max_batch_size` inputs and `max_batch_tokens` tokens in all. A job that does not fit leads the next group, while shorter ones behind it
may ride along in this one (a short request is not held back by large ones queued before it; none waits more
than a group longer than it would in order). A job larger than the budget still runs, in a group of its own,
cut into forward passes by the model. It waits up to `max_wait_ms` for more only while requests come
concurrently (the last group held several, or some arrived while it ran): a lone client's request goes at
once, since waiting could gain it no company, only latency.

A job is taken (marked running) the moment it leaves the queue, so that a request given up while still
queued (its timeout passed) is skipped and never runs, and one already taken is never given up. One group
runs at a time, in a daemon thread (`Worker`), so the event loop keeps answering (health checks, refusals)
meanwhile, and a forward pass that hangs cannot keep the process from exiting. `running_for` tells how long
the pass under way has run: the server calls it stalled past its request timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("bertkit")
Call = tuple[asyncio.AbstractEventLoop, asyncio.Future, Callable[..., Any], tuple[Any, ...]]  # loop, future, fn, args


@dataclass(eq=False)
class Job:
    """One request's work on its way through the batcher; `done` gets its result."""

    work: Any
    tokens: int
    size: int = 1  # inputs: what max_batch_size counts
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    queued: float = field(default_factory=time.perf_counter)
    state: str = "queued"  # queued -> running (taken into a group) -> finished; or "dropped": given up, never run


class Worker:
    """Daemon threads that run calls off the event loop. Unlike asyncio's default executor, whose threads the
    interpreter joins at exit, a call that hangs here cannot hold the process after SIGTERM."""

    def __init__(self, threads: int = 1, name: str = "bertkit-worker"):
        self.calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(threads)]
        for thread in self.threads:
            thread.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """A future of `fn(*args)`, run in one of the threads (cheaper on the loop than run_in_executor)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.calls.put((loop, future, fn, args))
        return future

    def close(self) -> None:
        """Ends the threads once their calls are done (a hung one stays, a daemon: it ends with the process)."""
        for _ in self.threads:
            self.calls.put(None)

    def _work(self) -> None:
        # the calls queued together are run one after another and settled in one callback: a thread's wake-up of
        # the event loop (a write to its self-pipe, a turn of the loop) is paid once for all of them
        closing = False
        while not closing:
            settled: list[tuple[Any, asyncio.Future, Any, BaseException | None]] = []
            call = self.calls.get()
            while call is not None:
                loop, future, fn, args = call
                try:
                    settled.append((loop, future, fn(*args), None))
                except BaseException as e:  # handed to the awaiting coroutine, which decides
                    settled.append((loop, future, None, e))
                if len(settled) >= 32:
                    break
                try:
                    call = self.calls.get_nowait()
                except queue.Empty:
                    break
            closing = call is None
            for loop in {entry[0] for entry in settled}:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits for it any more
                    loop.call_soon_threadsafe(_settle, [entry[1:] for entry in settled if entry[0] is loop])


def _settle(settled: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    for future, result, error in settled:
        if future.done():  # cancelled: its awaiter went away
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class Batcher:
    """Groups concurrent jobs into calls of `run` (the works of a group -> one result per job), one at a time."""

    def __init__(self, run: Callable[[list[Any]], list[Any]], max_batch_size: int, max_batch_tokens: int,
                 max_wait_ms: float, observe: Callable[[int], None] = lambda n: None):
        self.run_batch, self.max_batch_size, self.max_batch_tokens = run, max_batch_size, max_batch_tokens
        self.max_wait, self.observe = max_wait_ms / 1000, observe
        self.waiting: deque[Job] = deque()
        self.arrived = asyncio.Event()
        self.crowded = False  # requests came concurrently lately: worth waiting for company
        self.queued_tokens = 0  # of the jobs queued (kept as they come and go: read at every request's admission)
        self.running_tokens = 0
        self.pass_started: float | None = None  # when the group under way went to the model (None: none is)
        self.seconds_per_token: float | None = None  # measured on the groups run so far (a moving average)
        self.worker = Worker(name="bertkit-forward")

    def backlog(self) -> float:
        """Seconds the work queued and running will take, at the pace measured so far (0 before any is measured)."""
        return (self.queued_tokens + self.running_tokens) * (self.seconds_per_token or 0.0)

    def running_for(self) -> float:
        """Seconds the forward pass under way has run (0 when none runs)."""
        return 0.0 if self.pass_started is None else time.perf_counter() - self.pass_started

    def add(self, job: Job) -> None:
        self.waiting.append(job)
        self.queued_tokens += job.tokens
        self.arrived.set()

    def drop(self, job: Job) -> bool:
        """Gives up a job still queued (it will never run); tells whether it was (a taken job runs)."""
        if job.state != "queued":
            return False
        job.state = "dropped"
        self.queued_tokens -= job.tokens
        return True

    async def run(self) -> None:
        """Runs groups until cancelled."""
        try:
            while True:
                group = await self._group()
                await self._answer(group)
                self.crowded = len(group) > 1 or bool(self.waiting)
        finally:
            self.worker.close()

    def _take(self, job: Job) -> Job:
        self.waiting.remove(job)  # by identity (Job has eq=False); the head is found at once
        self.queued_tokens -= job.tokens
        job.state = "running"  # from here on it runs: a timeout can no longer drop it
        return job

    def _next(self) -> Job | None:
        while self.waiting and self.waiting[0].state == "dropped":
            self.waiting.popleft()
        return self.waiting[0] if self.waiting else None

    async def _group(self) -> list[Job]:
        """The next group: the oldest job, and the jobs queued behind it that fit beside it (a job that does not
        fit stays at the head of the queue: it leads the next group), waiting for company while crowded."""
        while (head := self._next()) is None:
            self.arrived.clear()
            await self.arrived.wait()
        group = [self._take(head)]
        size, tokens = head.size, head.tokens
        deadline = time.perf_counter() + (self.max_wait if self.crowded else 0.0)
        while size < self.max_batch_size:
            fits = [job for job in self.waiting if job.state == "queued" and size + job.size <= self.max_batch_size
                    and tokens + job.tokens <= self.max_batch_tokens]
            for job in fits:  # in order, while they still fit
                if size + job.size <= self.max_batch_size and tokens + job.tokens <= self.max_batch_tokens:
                    group.append(self._take(job))
                    size, tokens = size + job.size, tokens + job.tokens
            left = deadline - time.perf_counter()
            if left <= 0 or size >= self.max_batch_size:
                break
            self.arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), left)
        return group

    async def _answer(self, group: list[Job]) -> None:
        self.observe(sum(job.size for job in group))
        self.running_tokens = sum(job.tokens for job in group)
        self.pass_started = t0 = time.perf_counter()
        try:
            results = await self.worker.call(self.run_batch, [job.work for job in group])
            pace = (time.perf_counter() - t0) / max(self.running_tokens, 1)
            self.seconds_per_token = pace if self.seconds_per_token is None else 0.8 * self.seconds_per_token + 0.2 * pace
        except Exception as e:  # the model failed: every job of the group hears it
            for job in group:
                job.state = "finished"
                if not job.done.done():
                    job.done.set_exception(e)
            return
        finally:
            self.running_tokens, self.pass_started = 0, None
        for job, result in zip(group, results, strict=True):
            job.state = "finished"
            if job.done.done():  # the client may have gone
                continue
            if isinstance(result, Exception):  # this job's own failure (making its answer): it alone hears it
                job.done.set_exception(result)
            else:
                job.done.set_result(result)
