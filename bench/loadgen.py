"""A closed-loop HTTP/1.1 load generator: N clients, one keep-alive connection each.

Raw asyncio sockets on uvloop with the httptools response parser, so the generator costs a few
tens of microseconds per request. It runs in its own process (``python -m bench.loadgen``) and
takes one JSON command per line on stdin, answering one JSON line on stdout per command, so the
same warm process drives every target in turn.

Per run it reports completed operations, errors, every latency (µs) of the measured window, and
the CPU time that the processes named in ``pids`` spent during exactly that window (read from
``/proc/<pid>/stat`` at the window's edges).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httptools
import orjson

from bench import workloads as w

try:
    import uvloop
except ImportError:  # pragma: no cover - uvicorn[standard] brings it
    uvloop = None  # type: ignore[assignment]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class ConnectionClosed(Exception):
    pass


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request in flight at a time."""

    __slots__ = ("transport", "parser", "waiter", "body", "closed", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionClosed(str(exc) if exc else "connection closed by the server"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((self.parser.get_status_code(), b"".join(self.body)))

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def send(self, data: bytes) -> tuple[int, bytes]:
        if self.closed or self.transport is None:
            raise ConnectionClosed("connection closed")
        self.waiter = waiter = self.loop.create_future()
        self.transport.write(data)
        return await waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


Op = Callable[[Conn, int], Awaitable[None]]


def make_op(workload: str, rb: w.RequestBuilder) -> Op:
    """The coroutine performing one operation of a workload on a connection."""
    if workload == "tools_list":

        async def op(conn: Conn, rid: int) -> None:
            w.check_tools_list(*await conn.send(rb.tools_list(rid)))

    elif workload == "tools_list_cached":

        async def op(conn: Conn, rid: int) -> None:
            w.check_tools_list_of(rid, *await conn.send(rb.tools_list(rid, route="cached")))

    elif workload == "small_call":

        async def op(conn: Conn, rid: int) -> None:
            w.check_small(*await conn.send(rb.call(rid, "small")))

    elif workload == "small_call_policy":

        async def op(conn: Conn, rid: int) -> None:
            w.check_small(*await conn.send(rb.call(rid, "small", route="policy")))

    elif workload == "small_call_light":

        async def op(conn: Conn, rid: int) -> None:
            w.check_small(*await conn.send(rb.call(rid, "small", route="light")))

    elif workload == "big_call":

        async def op(conn: Conn, rid: int) -> None:
            w.check_big(*await conn.send(rb.call(rid, "big")))

    elif workload == "mrtr":

        async def op(conn: Conn, rid: int) -> None:
            state = w.check_round1(
                *await conn.send(rb.call(rid, "ask", capabilities=w.ELICIT_CAPS))
            )
            retry = rb.call(
                rid + 1,
                "ask",
                capabilities=w.ELICIT_CAPS,
                extra={"inputResponses": w.ANSWER, "requestState": state},
            )
            w.check_round2(*await conn.send(retry))

    elif workload in w.BRIDGE_WORKLOADS:
        route = w.BRIDGE_WORKLOADS[workload][2]

        async def op(conn: Conn, rid: int) -> None:
            args = {"date": "2026-12-24"}
            first = rb.call(
                rid, "book_table", route=route, capabilities=w.ELICIT_CAPS, arguments=args
            )
            key, state = w.legacy_answer(*await conn.send(first))
            retry = rb.call(
                rid + 1,
                "book_table",
                route=route,
                capabilities=w.ELICIT_CAPS,
                arguments=args,
                extra={
                    "inputResponses": {key: {"action": "accept", "content": {"size": 4}}},
                    "requestState": state,
                },
            )
            w.check_legacy_done(*await conn.send(retry))

    elif workload == "sse_progress":

        async def op(conn: Conn, rid: int) -> None:
            w.check_sse(*await conn.send(rb.call(rid, "progress", route="sse", progress_token=rid)))

    else:
        raise ValueError(f"unknown workload {workload!r}")
    return op


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One measured run: ``concurrency`` clients for ``warmup`` + ``duration`` seconds."""
    loop = asyncio.get_running_loop()
    target = w.Target(
        spec["host"],
        spec["port"],
        spec["json_path"],
        spec["sse_path"],
        spec.get("cached_path", spec["json_path"]),
        spec.get("policy_path", spec["json_path"]),
        light_path=spec.get("light_path", spec["json_path"]),
        paths=spec.get("paths"),
        headers=tuple(spec.get("headers", ())),
    )
    op = make_op(spec["workload"], w.RequestBuilder(target))
    concurrency = int(spec["concurrency"])
    pids = [int(p) for p in spec.get("pids", [])]
    per_op = w.ALL_WORKLOADS[spec["workload"]][1]

    latencies: list[int] = []
    errors: list[str] = []
    error_count = 0
    completed = 0
    cpu_marks: dict[str, dict[int, float | None]] = {}
    self_marks: dict[str, float] = {}

    def mark(name: str) -> None:
        cpu_marks[name] = {pid: cpu_seconds(pid) for pid in pids}
        t = os.times()
        self_marks[name] = t.user + t.system

    now = time.perf_counter()
    t_warm = now + float(spec.get("warmup", 0.5))
    t_end = t_warm + float(spec["duration"])
    loop.call_at(loop.time() + (t_warm - now), mark, "start")
    loop.call_at(loop.time() + (t_end - now), mark, "end")
    clock = time.perf_counter_ns
    warm_ns = int(t_warm * 1e9)
    end_ns = int(t_end * 1e9)

    async def connect() -> Conn:
        _, conn = await loop.create_connection(lambda: Conn(loop), target.host, target.port)
        return conn

    async def client(index: int) -> None:
        nonlocal completed, error_count
        rid = index * 10_000_000
        conn: Conn | None = None
        while True:
            t0 = clock()
            if t0 >= end_ns:
                break
            try:
                if conn is None or conn.closed:
                    conn = await connect()
                    t0 = clock()
                rid += 2
                await op(conn, rid)
            except (OSError, ConnectionClosed, w.BadAnswer, httptools.HttpParserError) as exc:
                error_count += 1
                if len(errors) < 5:
                    errors.append(f"{type(exc).__name__}: {exc}"[:400])
                if conn is not None:
                    conn.close()
                    conn = None
                await asyncio.sleep(0.01)
                continue
            t1 = clock()
            if t0 >= warm_ns:
                latencies.append((t1 - t0) // 1000)
            if warm_ns <= t1 <= end_ns:
                completed += 1
        if conn is not None:
            conn.close()

    tasks = [asyncio.create_task(client(i)) for i in range(concurrency)]
    done, pending = await asyncio.wait(tasks, timeout=(t_end - time.perf_counter()) + 60)
    for task in pending:
        task.cancel()
    if "end" not in cpu_marks:
        mark("end")
    window = float(spec["duration"])
    cpu = {}
    for pid in pids:
        a, b = cpu_marks.get("start", {}).get(pid), cpu_marks["end"].get(pid)
        cpu[str(pid)] = None if a is None or b is None else round(b - a, 4)
    return {
        "workload": spec["workload"],
        "concurrency": concurrency,
        "window_s": window,
        "ops": completed,
        "http_requests": completed * per_op,
        "errors": error_count,
        "error_samples": errors,
        "timed_out_clients": len(pending),
        "latencies_us": latencies,
        "cpu_s": cpu,
        "loadgen_cpu_s": round(self_marks["end"] - self_marks.get("start", self_marks["end"]), 4),
    }


def _run_sync(spec: dict[str, Any]) -> dict[str, Any]:
    if uvloop is not None:
        return uvloop.run(run(spec))
    return asyncio.run(run(spec))  # pragma: no cover


def serve() -> None:
    """Answer JSON commands from stdin, one per line, until EOF."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        spec = orjson.loads(line)
        try:
            result = _run_sync(spec)
        except Exception as exc:  # report, keep serving
            result = {"fatal": f"{type(exc).__name__}: {exc}"}
        out.write(orjson.dumps(result) + b"\n")
        out.flush()


if __name__ == "__main__":
    serve()
