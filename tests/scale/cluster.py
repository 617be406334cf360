"""Real parts for the scale-out tests: upstream processes, gateway replicas, nginx, Redis.

Every process is a `ManagedProcess` (own process group, stopped with SIGTERM then SIGKILL, killed
at interpreter exit anyway); every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import (
    ManagedProcess,
    free_port,
    python_script,
    venv_command,
    wait_for_port,
    write_private,
)

REQUIRE_ALL = os.environ.get("REQUIRE_ALL") == "1"
STARTUP_TIMEOUT = 30.0


def find_binary(name: str, *fallbacks: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next((path for path in fallbacks if os.access(path, os.X_OK)), None)


NGINX = find_binary("nginx", "/usr/sbin/nginx")
REDIS_SERVER = find_binary("redis-server", "/usr/bin/redis-server")

#: One synchronous client for probes and scrapes (building a client per call is slow).
_http = httpx.Client(timeout=5.0, trust_env=False)


def wait_http(
    url: str, *, timeout: float = STARTUP_TIMEOUT, process: ManagedProcess | None = None
) -> None:
    """Wait until GET url answers 200."""
    parts = httpx.URL(url)
    wait_for_port(parts.port or 80, host=parts.host, timeout=timeout, process=process)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if process is not None and not process.running:
            raise RuntimeError(f"{process.name} exited early:\n{process.log_tail()}")
        try:
            response = _http.get(url, timeout=1.0)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.05)
    tail = process.log_tail() if process is not None else ""
    raise TimeoutError(f"{url} not ready after {timeout:.0f}s ({last})\n{tail}")


def free_port_on(*hosts: str) -> int:
    """A port free on each of `hosts` (127.0.0.2 and 127.0.0.3: one port, two addresses)."""
    for _ in range(50):
        port = free_port(hosts[0])
        try:
            for host in hosts[1:]:
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no common free port on {hosts}")


# ------------------------------------------------------------------ metrics


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str) -> Samples:
    text = _http.get(f"{base}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


# ------------------------------------------------------------------ processes


class Upstream:
    """tests/servers/mrtr_upstream.py on host:port."""

    def __init__(
        self, tmp: Path, *args: str, host: str = "127.0.0.1", port: int | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}/mcp"
        argv = python_script("mrtr_upstream.py", "--host", host, "--port", str(self.port), *args)
        self.process = ManagedProcess(
            f"upstream-{host}-{self.port}", argv, log_path=tmp / f"upstream-{host}-{self.port}.log"
        )

    def wait(self) -> None:
        wait_for_port(self.port, host=self.host, timeout=STARTUP_TIMEOUT, process=self.process)

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = _http.get(f"http://{self.host}:{self.port}/stats").json()
        return result

    def stop(self) -> None:
        self.process.stop(grace=3.0)


class RedisServer:
    def __init__(self, tmp: Path, port: int | None = None) -> None:
        assert REDIS_SERVER is not None
        self.tmp = tmp
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: ManagedProcess | None = None
        self.starts = 0

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.starts += 1
        argv = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.tmp),
            "--daemonize",
            "no",
        ]
        self.process = ManagedProcess("redis", argv, log_path=self.tmp / "redis.log")

    def wait(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        wait_for_port(self.port, timeout=STARTUP_TIMEOUT, process=self.process)
        while time.monotonic() < deadline:  # accepting connections is not yet serving (loading)
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise TimeoutError("redis-server does not answer PING")

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing is saved (no persistence configured anyway)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.stop(grace=3.0)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=3.0)


@dataclass
class Replica:
    """One `mcp-edge serve` process; restartable on the same port with another key ring."""

    index: int
    tmp: Path
    config: dict[str, Any]
    port: int = field(default_factory=free_port)
    #: A listener of its own for the replicas' endpoints (``cluster.listen``), if given.
    cluster_port: int | None = None
    #: A listener of its own for the admin endpoints (``admin.listen``), if given: health,
    #: readiness and metrics are read there.
    admin_port: int | None = None
    process: ManagedProcess | None = None
    keys: str = ""
    generation: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cluster_base(self) -> str:
        return f"http://127.0.0.1:{self.cluster_port}"

    @property
    def admin_base(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}" if self.admin_port else self.base

    def start(self, keys: str) -> None:
        self.keys = keys
        self.generation += 1
        doc = {
            **self.config,
            "listen": {"host": "127.0.0.1", "port": self.port, "drain_seconds": 2},
        }
        if self.cluster_port is not None:
            doc["cluster"] = {**doc.get("cluster", {}), "listen": {"port": self.cluster_port}}
        if self.admin_port is not None:
            doc["admin"] = {**doc.get("admin", {}), "listen": {"port": self.admin_port}}
        path = self.tmp / f"replica{self.index}.yaml"
        write_private(path, yaml.safe_dump(doc, sort_keys=False))
        argv = [*venv_command("mcp-edge"), "serve", "--config", str(path)]
        self.process = ManagedProcess(
            f"replica{self.index}",
            argv,
            log_path=self.tmp / f"replica{self.index}.gen{self.generation}.log",
            env={"MCP_EDGE_STATE_KEYS": keys},
        )

    def wait(self) -> None:
        wait_http(f"{self.admin_base}/readyz", process=self.process)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=5.0)

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.stop(grace=3.0)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def restart(self, keys: str) -> None:
        self.stop()
        self.start(keys)
        self.wait()

    def metrics(self) -> Samples:
        return scrape(self.admin_base)

    def log_lines(self) -> list[str]:
        return sorted(str(p) for p in self.tmp.glob(f"replica{self.index}.gen*.log"))


class Nginx:
    """nginx from the distribution: a plain round-robin balancer (no affinity) for the replicas."""

    def __init__(self, tmp: Path, backends: Sequence[int], port: int | None = None) -> None:
        assert NGINX is not None
        self.tmp = tmp / "nginx"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.access_log = self.tmp / "access.log"
        servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=0;" for p in backends)
        # As root, workers would run as nobody and could not reach the private temp dir.
        user = "user root;\n" if os.geteuid() == 0 else ""
        conf = f"""{user}daemon off;
worker_processes 1;
pid {self.tmp}/nginx.pid;
error_log {self.tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format balancer '$request_uri $status marker=$http_x_test_marker upstream=$upstream_addr';
    access_log {self.access_log} balancer;
    client_body_temp_path {self.tmp}/client_body;
    proxy_temp_path {self.tmp}/proxy;
    fastcgi_temp_path {self.tmp}/fastcgi;
    uwsgi_temp_path {self.tmp}/uwsgi;
    scgi_temp_path {self.tmp}/scgi;
    upstream gateways {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://gateways;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_next_upstream error timeout;
            proxy_connect_timeout 2s;
            proxy_read_timeout 30s;
        }}
    }}
}}
"""
        self.conf = self.tmp / "nginx.conf"
        self.conf.write_text(conf)
        argv = [NGINX, "-p", str(self.tmp), "-c", str(self.conf), "-e", str(self.tmp / "error.log")]
        self.process = ManagedProcess("nginx", argv, log_path=self.tmp / "stderr.log")

    def wait(self) -> None:
        wait_for_port(self.port, timeout=STARTUP_TIMEOUT, process=self.process)

    def access_entries(self) -> list[str]:
        return self.access_log.read_text().splitlines() if self.access_log.exists() else []

    def marked(self, marker: str) -> list[str]:
        """The entries of the requests that carried ``marker`` in their ``X-Test-Marker`` header
        (a test finds its own requests by it: probes and other tests' requests share the log)."""
        token = f" marker={marker} "
        return [entry for entry in self.access_entries() if token in entry]

    def wait_marked(self, marker: str, count: int, timeout: float = 10.0) -> list[str]:
        """The entries marked ``marker`` once there are ``count`` of them, or those there are after
        ``timeout`` (nginx writes an entry once the answer is sent: the client may be faster)."""
        deadline = time.monotonic() + timeout
        while len(entries := self.marked(marker)) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return entries

    def stop(self) -> None:
        self.process.stop(grace=3.0)


def gateway_config(
    routes: list[dict[str, Any]], *, store: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "gateway": {"id": "mcp-edge-scale"},
        "auth": {"mode": "anonymous"},
        "logging": {"format": "json", "level": "info"},
        "routes": routes,
    }
    if store is not None:
        doc["store"] = dict(store)
    return doc
