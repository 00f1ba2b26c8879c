"""Loopback load for the serving benchmarks: many HTTP/1.1 keep-alive clients as coroutines in one process, and a
health probe in a process of its own (so that the load's own busy event loop does not delay the probe).

    records = asyncio.run(flood(port, clients=256, seconds=30, path="/v1/predict", body=make_body))

Each client sends a request, reads the whole answer, and sends the next on the same connection (reconnecting
only when the server closes it); it stops by itself when the time is up, and targets 127.0.0.1 only. A
record is (status, seconds, retry_after); a failure to connect, send or read is a record of status 0, a
"broken" connection.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import Any

HOST = "127.0.0.1"


class Connection:
    """One keep-alive HTTP/1.1 connection to the server on loopback."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        reused = self.writer is not None
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        head = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", f"Content-Length: {len(body)}",
                "Content-Type: application/json", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        assert self.reader is not None and self.writer is not None
        try:
            self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await self.writer.drain()
            status_line = await self.reader.readline()
        except ConnectionError:
            status_line = b""
        if not status_line and reused:  # the server closed a connection left idle (keep-alive timeout): as any
            self.close()                # HTTP client does, open a new one and send the request again
            return await self.request(method, path, body, headers)
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        answer: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            answer[name.strip().lower()] = value.strip()
        data = await self.reader.readexactly(int(answer.get("content-length", 0)))
        if answer.get("connection", "").lower() == "close":
            self.close()
        return status, answer, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def flood(port: int, clients: int, seconds: float, path: str, body: Callable[[int, int], bytes],
                headers: dict[str, str] | None = None, per_client: int | None = None,
                polite: bool = False) -> list[tuple[int, float, str]]:
    """Every client's records: (status, seconds, Retry-After) per request, status 0 for a broken connection.
    `polite` clients wait the Retry-After a 429 or 503 gives before their next request, as a well-behaved
    client (OpenAI's, a load balancer's) does; the others send it at once."""
    stop = time.perf_counter() + seconds
    records: list[tuple[int, float, str]] = []

    async def client(c: int) -> None:
        conn, k = Connection(port), 0
        while time.perf_counter() < stop and (per_client is None or k < per_client):
            t0 = time.perf_counter()
            try:
                status, answer, _ = await conn.request("POST", path, body(c, k), headers)
                records.append((status, time.perf_counter() - t0, answer.get("retry-after", "")))
                if polite and answer.get("retry-after"):
                    await asyncio.sleep(min(float(answer["retry-after"]), max(stop - time.perf_counter(), 0)))
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
                records.append((0, time.perf_counter() - t0, ""))
                conn.close()
            k += 1
        conn.close()

    await asyncio.gather(*(client(c) for c in range(clients)))
    return records


def _probe(port: int, seconds: float, every: float, out: Any) -> None:
    async def run() -> list[float]:
        conn, times = Connection(port), []
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                status, _, _ = await conn.request("GET", "/health")
                times.append(time.perf_counter() - t0 if status == 200 else float("inf"))
            except (OSError, ConnectionError, asyncio.IncompleteReadError):
                times.append(float("inf"))
                conn.close()
            await asyncio.sleep(every)
        return times

    out.put(asyncio.run(run()))


def start_probe(port: int, seconds: float, every: float = 0.05) -> tuple[Any, Any]:
    """Starts GET /health every `every` seconds for `seconds`, in a process of its own; `probe_result` reads it."""
    queue: Any = multiprocessing.get_context("spawn").Queue()
    process = multiprocessing.get_context("spawn").Process(target=_probe, args=(port, seconds, every, queue))
    process.start()
    return process, queue


def probe_result(probe: tuple[Any, Any]) -> list[float]:
    process, queue = probe
    times = queue.get(timeout=600)
    process.join()
    return times


def summary(records: list[tuple[int, float, str]], seconds: float) -> dict[str, Any]:
    """Counts by status and the latencies of the answered and of the refused."""
    by: dict[int, list[float]] = {}
    for status, took, _ in records:
        by.setdefault(status, []).append(took)
    ok = sorted(by.get(200, []))

    def pct(values: list[float], q: float) -> float | None:
        return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 2) if values else None

    refused = sorted(by.get(429, []))
    return {
        "requests": len(records), "by_status": {str(k): len(v) for k, v in sorted(by.items())},
        "ok_per_s": round(len(ok) / seconds, 1), "p50_ms": pct(ok, 0.5), "p99_ms": pct(ok, 0.99),
        "refused_p50_ms": pct(refused, 0.5), "refused_p99_ms": pct(refused, 0.99),
        "retry_after_on_every_429": all(r for s, _, r in records if s == 429),
        "broken": len(by.get(0, [])), "server_errors": sum(len(v) for k, v in by.items() if k >= 500),
        "median_all_ms": round(1000 * statistics.median(t for _, t, _ in records), 2) if records else None,
    }


def json_body(payload: Any) -> bytes:
    return json.dumps(payload).encode()
