"""Real Redis deployments that fail over, on loopback ports in a temporary directory: a Sentinel
group (a master, two replicas, three sentinels) and a Cluster (three masters, three replicas).

Every server is a `ManagedProcess` (own process group, stopped with what it spawned); every wait is
bounded and event-based (the servers' own answers, never a sleep that hopes). ``answer_shape``
names what kind of answer the gateway gave while its store failed over.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.scale.cluster import REDIS_SERVER
from tests.support.processes import ManagedProcess, free_port, run_bounded, wait_for_port

REDIS_CLI = shutil.which("redis-cli") or (
    "/usr/bin/redis-cli" if os.access("/usr/bin/redis-cli", os.X_OK) else None
)
MASTER = "edge"
STARTUP_TIMEOUT = 30.0
FAILOVER_TIMEOUT = 45.0

#: The two shapes an answer may have while the store fails over.
SUCCESS = "success"
STORE_REFUSAL = "503 state_store_unavailable"


def answer_shape(response: httpx.Response, request_id: Any) -> tuple[str, dict[str, Any] | None]:
    """What kind of answer this is, and its JSON-RPC message: ``SUCCESS`` (HTTP 200, a result for
    the request's id), ``STORE_REFUSAL`` (HTTP 503, ``-32603`` with ``data.reason:
    state_store_unavailable`` for the request's id, ``Retry-After`` in whole seconds), or anything
    else, named by its status, content type and the start of its body (a plain-text 500 too)."""
    content_type = response.headers.get("content-type", "")
    doc: Any = None
    if content_type.startswith("application/json"):
        try:
            doc = response.json()
        except ValueError:
            doc = None
    if isinstance(doc, dict) and doc.get("jsonrpc") == "2.0" and doc.get("id") == request_id:
        if response.status_code == 200 and "result" in doc:
            return SUCCESS, doc
        error = doc.get("error") or {}
        retry_after = response.headers.get("retry-after", "")
        if (
            response.status_code == 503
            and error.get("code") == -32603
            and error.get("data") == {"reason": "state_store_unavailable"}
            and isinstance(error.get("message"), str)
            and retry_after.isdigit()
            and int(retry_after) >= 1
        ):
            return STORE_REFUSAL, doc
    shown = content_type or "no content type"
    return f"HTTP {response.status_code} {shown}: {response.text[:120]!r}", doc


def probe(port: int, *args: str, timeout: float = 2.0) -> Any:
    """One command on a fresh connection; None when nothing answers (a dead or loading node)."""
    conn = redis.Connection(
        port=port, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
    )
    try:
        conn.send_command(*args)
        return conn.read_response()  # the raw reply: no parsing callbacks
    except (redis.RedisError, OSError):
        return None
    finally:
        conn.disconnect()


def info_field(port: int, section: str, name: str) -> str | None:
    """A field of ``INFO <section>`` (``CLUSTER INFO`` for the section ``cluster``)."""
    text = probe(port, "CLUSTER", "INFO") if section == "cluster" else probe(port, "INFO", section)
    if not isinstance(text, (str, bytes)):
        text = ""
    for line in str(text).splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def wait_until(what: str, check, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Poll `check` until it is true; seconds it took. TimeoutError naming `what` otherwise."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    raise TimeoutError(f"{what}: not after {timeout:.0f}s")


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, and below 55536."""
    for _ in range(200):
        port = free_port()
        if port > 55535:
            continue
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class Node:
    """One redis-server (or sentinel) process."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        args: list[str],
        *,
        port: int | None = None,
        conf: str | None = None,
    ) -> None:
        assert REDIS_SERVER is not None
        self.name = name
        self.port = port or free_port()
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [REDIS_SERVER]
        if conf is not None:  # sentinels rewrite their configuration file
            path = self.dir / "sentinel.conf"
            path.write_text(conf)
            argv += [str(path), "--sentinel"]
        argv += [
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            *args,
        ]
        self.process = ManagedProcess(name, argv, log_path=self.dir / "server.log")

    def wait(self) -> None:
        wait_for_port(self.port, timeout=STARTUP_TIMEOUT, process=self.process)

        def pong() -> bool:
            if not self.process.running:
                raise RuntimeError(f"{self.name} exited:\n{self.process.log_tail()}")
            return bool(probe(self.port, "PING") == "PONG")

        wait_until(f"{self.name} answers PING", pong, STARTUP_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is saved, nothing is handed over."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.stop(grace=3.0)

    def stop(self) -> None:
        self.process.stop(grace=3.0)


DATA = [
    "--save",
    "",
    "--appendonly",
    "no",
    "--repl-diskless-sync",
    "yes",
    "--repl-diskless-sync-delay",
    "0",
]


def replicated(master: Node, replica: Node) -> bool:
    """The replica holds everything the master had acknowledged when asked (offsets)."""
    offset = info_field(master.port, "replication", "master_repl_offset")
    return offset is not None and int(
        info_field(replica.port, "replication", "slave_repl_offset") or -1
    ) >= int(offset)


class SentinelGroup:
    """A master, two replicas and three sentinels (quorum 2, down after 1 s)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.master = Node(tmp, "master", DATA)
        self.replicas = [
            Node(tmp, f"replica{i}", [*DATA, "--replicaof", "127.0.0.1", str(self.master.port)])
            for i in (1, 2)
        ]
        self.sentinels: list[Node] = []
        for i in range(3):
            conf = (
                f"sentinel monitor {MASTER} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 4000\n"
                f"sentinel parallel-syncs {MASTER} 2\n"
            )
            self.sentinels.append(Node(tmp, f"sentinel{i}", [], conf=conf))

    @property
    def nodes(self) -> list[Node]:
        return [self.master, *self.replicas, *self.sentinels]

    @property
    def url(self) -> str:
        return (
            "redis+sentinel://"
            + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
            + f"/{MASTER}/0"
        )

    def start(self) -> None:
        for node in self.nodes:
            node.wait()

        def ready() -> bool:
            for s in self.sentinels:
                if info_field(s.port, "sentinel", "master0") is None:
                    return False
                status = info_field(s.port, "sentinel", "master0") or ""
                if (
                    "slaves=2" not in status
                    or "sentinels=3" not in status
                    or "status=ok" not in status
                ):
                    return False
            return all(
                info_field(r.port, "replication", "master_link_status") == "up"
                for r in self.replicas
            )

        wait_until("sentinels see the master, both replicas and each other", ready, STARTUP_TIMEOUT)

    def master_port(self) -> int | None:
        for s in self.sentinels:
            reply = probe(s.port, "SENTINEL", "get-master-addr-by-name", MASTER)
            if isinstance(reply, (list, tuple)) and len(reply) == 2:
                return int(reply[1])
        return None

    def replicated(self) -> bool:
        """Every replica holds everything the master acknowledged so far (offsets)."""
        offset = info_field(self.master.port, "replication", "master_repl_offset")
        target = int(offset) if offset else -1
        return target >= 0 and all(
            int(info_field(r.port, "replication", "slave_repl_offset") or -1) >= target
            for r in self.replicas
        )

    def failed_over(self) -> bool:
        """A replica is master, and the other replica follows it."""
        port = self.master_port()
        if port is None or port == self.master.port:
            return False
        follower = next(r for r in self.replicas if r.port != port)
        return info_field(port, "replication", "role") == "master" and (
            info_field(follower.port, "replication", "master_port") == str(port)
            and info_field(follower.port, "replication", "master_link_status") == "up"
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class RedisClusterGroup:
    """Three masters with a replica each, ``cluster-node-timeout 1000``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        args = [
            *DATA,
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "1000",
            "--cluster-replica-validity-factor",
            "0",
        ]
        self.nodes = [
            Node(
                tmp, f"node{i}", [*args, "--cluster-config-file", "nodes.conf"], port=cluster_port()
            )
            for i in range(6)
        ]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def start(self) -> None:
        assert REDIS_CLI is not None
        for node in self.nodes:
            node.wait()
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        done = run_bounded(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            timeout=60,
        )
        assert done.returncode == 0, done.output[-2000:]
        wait_until(
            "the cluster is ok on every node, each master with a replica",
            self.healthy,
            STARTUP_TIMEOUT,
        )

    def roles(self, port: int) -> list[tuple[int, str, str, str]]:
        """(port, flags, master id, link state) of every node as `port` sees it, and the node id first."""
        out = []
        for line in str(probe(port, "CLUSTER", "NODES") or "").splitlines():
            fields = line.split()
            if len(fields) >= 8 and ":" in fields[1]:
                out.append(
                    (
                        int(fields[1].split("@")[0].rsplit(":", 1)[1]),
                        fields[2],
                        fields[3],
                        fields[7],
                    )
                )
        return out

    def healthy(self, alive: list[Node] | None = None) -> bool:
        alive = alive or self.nodes
        for node in alive:
            if info_field(node.port, "cluster", "cluster_state") != "ok":
                return False
        view = self.roles(alive[0].port)
        masters = [v for v in view if "master" in v[1] and "fail" not in v[1]]
        return len(masters) == 3 and all(
            v[3] == "connected" for v in view if v[0] in {n.port for n in alive}
        )

    def masters(self) -> list[Node]:
        return [n for n in self.nodes if info_field(n.port, "replication", "role") == "master"]

    def replica_of(self, master: Node) -> Node:
        for node in self.nodes:
            if node is not master and info_field(node.port, "replication", "master_port") == str(
                master.port
            ):
                return node
        raise LookupError(f"no replica of {master.name}")

    @staticmethod
    def replicated(master: Node, replica: Node) -> bool:
        offset = info_field(master.port, "replication", "master_repl_offset")
        return offset is not None and int(
            info_field(replica.port, "replication", "slave_repl_offset") or -1
        ) >= int(offset)

    def failed_over(self, dead: Node, heir: Node) -> bool:
        alive = [n for n in self.nodes if n is not dead]
        return info_field(heir.port, "replication", "role") == "master" and all(
            info_field(n.port, "cluster", "cluster_state") == "ok" for n in alive
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
