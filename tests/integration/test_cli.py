"""The ``mcp-edge`` command never shows a traceback: a user's mistake or a dependency out of reach
gets one line on stderr and the exit code ``mcp_edge.exits`` documents; ``serve`` says it is
listening only once a connection to the URL it prints succeeds; Ctrl-C stops with code 130.

Every case runs the real command as a process (``venv_command("mcp-edge")``) against real
sockets: a port bound and not listening (refused), a listener that never answers, one that answers
as no MCP server, a port another socket holds, a real redis-server.
"""

from __future__ import annotations

import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_edge import exits
from mcp_edge.core.seal import generate_key
from tests.conftest import require
from tests.support.cli import CLI, clean_env, cli, no_traceback, one_line
from tests.support.processes import (
    REPO_ROOT,
    WatchedProcess,
    free_port,
    write_private,
)
from tests.support.raw_http import CannedListener, http_answer, refused_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another socket listens on (every address), for as long as the test runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def config_file(tmp: Path, doc: dict, name: str = "gateway.yaml") -> Path:
    return write_private(tmp / name, yaml.safe_dump(doc))


# ---- try ----------------------------------------------------------------------------------------


def test_try_against_a_refused_port():
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}/mcp"
        line = one_line(cli("try", url), exits.UNREACHABLE)
    assert line == f"mcp-edge: {url}: connection refused by 127.0.0.1:{port}"


def test_try_against_an_unknown_host():
    line = one_line(cli("try", "http://no-such-host.invalid/mcp"), exits.UNREACHABLE)
    assert line == "mcp-edge: http://no-such-host.invalid/mcp: cannot resolve no-such-host.invalid"


def test_try_against_silence_times_out():
    with CannedListener(None) as silent:
        line = one_line(cli("try", silent.url, "--timeout", "1"), exits.UNREACHABLE)
    assert line == f"mcp-edge: {silent.url}: no answer within 1 s"
    assert silent.connections == 1


@pytest.mark.parametrize(
    "reply,says",
    [
        (
            http_answer("404 Not Found", "text/html", b"<html>no</html>"),
            "round 1: not an MCP answer: HTTP 404 text/html",
        ),
        (
            http_answer("200 OK", "application/json", b'{"hello": "world"}'),
            "round 1: not an MCP answer: HTTP 200 application/json",
        ),
        (
            http_answer("200 OK", "application/json", b"not json"),
            "round 1: not an MCP answer: HTTP 200 application/json",
        ),
        (
            http_answer("200 OK", "text/event-stream", b"event: message\n\n"),
            "round 1: not an MCP answer: HTTP 200 text/event-stream",
        ),
        (
            http_answer(
                "401 Unauthorized",
                "application/json",
                b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Unauthorized"}}',
            ),
            "round 1: the gateway answered HTTP 401, error -32001: Unauthorized (does the gateway want --token?)",
        ),
        (
            http_answer(
                "200 OK", "application/json", b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'
            ),
            'round 1: expected input_required with a requestState, got {"content": []}',
        ),
    ],
    ids=["html-page", "json-not-jsonrpc", "not-json", "sse-without-data", "401", "no-round"],
)
def test_try_against_something_else_than_the_demo(reply: bytes, says: str):
    with CannedListener(reply) as other:
        line = one_line(cli("try", other.url), exits.FAILED)
    assert line == f"mcp-edge: {says}"


@pytest.mark.parametrize(
    "url", ["notaurl", "ftp://127.0.0.1/mcp", "http://127.0.0.1:99999/mcp", "http:///mcp"]
)
def test_try_with_a_bad_url(url: str):
    line = one_line(cli("try", url), exits.USAGE, f"argument url: {url!r} is not")
    assert line.endswith("(see: mcp-edge try --help)")


def test_ctrl_c_during_try():
    with (
        CannedListener(None) as silent,
        WatchedProcess([*CLI, "try", silent.url, "--timeout", "60"], env=clean_env()) as proc,
    ):
        assert silent.accepted.wait(60), proc.output()  # the request is on its way
        proc.signal_group(signal.SIGINT)
        assert proc.wait(30) == exits.INTERRUPTED, proc.output()
    no_traceback(proc.output())
    assert proc.lines["stderr"] == ["mcp-edge: interrupted (Ctrl-C)"], proc.output()


# ---- tools (the store's Redis) ------------------------------------------------------------------


def pinning_config(tmp: Path, redis_url: str) -> Path:
    return config_file(
        tmp,
        {
            "auth": {"mode": "anonymous"},
            "store": {"type": "redis", "url": redis_url, "timeout_seconds": 0.5},
            "routes": [
                {
                    "name": "pinned",
                    "path": "/mcp",
                    "upstream": "http://127.0.0.1:1/mcp",
                    "policy": {"pin_tools": True},
                    "legacy_clients": "deny",
                }
            ],
        },
    )


@pytest.mark.parametrize(
    "action", [["digests"], ["accept", "--tool", "survey"]], ids=["digests", "accept"]
)
def test_tools_with_redis_down(tmp_path: Path, action: list[str]):
    with refused_port() as port:
        config = pinning_config(tmp_path, f"redis://:s3cret-pass@127.0.0.1:{port}/0")
        result = cli("tools", *action, "--config", str(config), "--route", "pinned")
    line = one_line(result, exits.UNREACHABLE)
    assert line == (
        f"mcp-edge: tools: cannot reach the store's Redis at 'redis://***@127.0.0.1:{port}/0': "
        "connection refused"
    )


def test_tools_with_redis_silent(tmp_path: Path):
    with CannedListener(None) as silent:
        config = pinning_config(tmp_path, f"redis://127.0.0.1:{silent.port}/0")
        line = one_line(
            cli("tools", "digests", "--config", str(config), "--route", "pinned"), exits.UNREACHABLE
        )
    assert (
        line
        == f"mcp-edge: tools: cannot reach the store's Redis at 'redis://127.0.0.1:{silent.port}/0': no answer within 0.5 s"
    )


def test_tools_with_an_unknown_redis_host(tmp_path: Path):
    config = pinning_config(tmp_path, "redis://no-such-host.invalid:6379/0")
    line = one_line(
        cli("tools", "digests", "--config", str(config), "--route", "pinned"), exits.UNREACHABLE
    )
    assert line == (
        "mcp-edge: tools: cannot reach the store's Redis at 'redis://no-such-host.invalid:6379/0': "
        "cannot resolve its host name"
    )


def test_tools_with_a_real_redis(tmp_path: Path):
    """The positive control: the same commands reach a real Redis (an empty one: nothing pinned,
    so nothing to accept)."""
    from tests.scale.cluster import REDIS_SERVER, RedisServer

    require(REDIS_SERVER is not None, "redis-server")
    redis = RedisServer(tmp_path)
    redis.start()
    try:
        redis.wait()
        config = pinning_config(tmp_path, redis.url)
        digests = cli("tools", "digests", "--config", str(config), "--route", "pinned")
        assert (digests.code, digests.out, digests.err) == (0, "", ""), digests
        line = one_line(
            cli(
                "tools", "accept", "--tool", "survey", "--config", str(config), "--route", "pinned"
            ),
            exits.FAILED,
        )
        assert line == "mcp-edge: tools: no definition of 'survey' seen on route 'pinned'"
    finally:
        redis.stop()


@pytest.mark.parametrize(
    "args,says",
    [
        (["--route", "nope"], "configuration error: no route named 'nope' (routes: pinned)"),
        (
            ["--route", "pinned", "--tool", "t", "--digest", "sha256:xyz"],
            "configuration error: --digest: 'sha256:xyz' is not a digest (sha256: and 64 hex digits)",
        ),
    ],
)
def test_tools_mistakes(tmp_path: Path, args: list[str], says: str):
    config = pinning_config(tmp_path, "redis://127.0.0.1:1/0")
    action = "accept" if "--tool" in args else "digests"
    assert (
        one_line(cli("tools", action, "--config", str(config), *args), exits.USAGE)
        == f"mcp-edge: {says}"
    )


# ---- serve: configuration ---------------------------------------------------------------------


SERVE = ["serve", "--upstream", "http://127.0.0.1:1/mcp", "--anonymous"]


def test_serve_without_a_key():
    one_line(cli(*SERVE), exits.USAGE, "mcp-edge: configuration error: no state key configured")


def test_serve_without_an_authentication_mode():
    one_line(
        cli(
            "serve",
            "--upstream",
            "http://127.0.0.1:1/mcp",
            env=clean_env(MCP_EDGE_STATE_KEYS=generate_key()),
        ),
        exits.USAGE,
        "--anonymous",
    )


def test_serve_with_a_bad_key():
    one_line(
        cli(*SERVE, env=clean_env(MCP_EDGE_STATE_KEYS="c2hvcnQ")), exits.USAGE, "at least 32 bytes"
    )


@pytest.mark.parametrize(
    "upstream", ["ftp://x/mcp", "127.0.0.1:3001/mcp", "http://", "http://[::1/mcp"]
)
def test_serve_with_a_bad_upstream_url(upstream: str):
    line = one_line(
        cli(
            "serve",
            "--upstream",
            upstream,
            "--anonymous",
            env=clean_env(MCP_EDGE_STATE_KEYS=generate_key()),
        ),
        exits.USAGE,
    )
    assert line.startswith("mcp-edge: configuration error: routes.0.upstream: "), line


@pytest.mark.parametrize(
    "content,says",
    [
        (None, "cannot be read: Is a directory"),
        (b"\xff\xfe\x00listen: {}", "is not UTF-8 text (byte 0)"),
        (
            b"listen: [\n",
            "is not valid YAML: expected the node content, but found '<stream end>' (line 2, column 1)",
        ),
        (b"- a list\n", "must hold a mapping at the top level"),
        (
            b"listen: {prot: 1}\nroutes: [{upstream: 'http://x/mcp'}]\n",
            "listen.prot: Extra inputs are not permitted",
        ),
    ],
    ids=["directory", "not-utf8", "bad-yaml", "not-a-mapping", "unknown-key"],
)
def test_serve_with_a_bad_config_file(tmp_path: Path, content: bytes | None, says: str):
    path = tmp_path / "gateway.yaml"
    if content is None:
        path.mkdir()
    else:
        write_private(path, "")
        path.write_bytes(content)
    one_line(
        cli("serve", "--config", str(path), env=clean_env(MCP_EDGE_STATE_KEYS=generate_key())),
        exits.USAGE,
        "mcp-edge: configuration error: ",
        says,
    )


def test_serve_with_a_missing_config_file(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    assert one_line(cli("serve", "--config", str(missing)), exits.USAGE) == (
        f"mcp-edge: configuration error: config file not found: {missing}"
    )


def test_serve_with_an_unreadable_key_file(tmp_path: Path):
    keyfile = write_private(tmp_path / "keys", "")
    keyfile.write_bytes(b"\xff\xfe")
    config = config_file(
        tmp_path,
        {
            "state": {"key_files": [str(keyfile)]},
            "auth": {"mode": "anonymous"},
            "routes": [{"upstream": "http://127.0.0.1:1/mcp"}],
        },
    )
    assert one_line(cli("serve", "--config", str(config)), exits.USAGE) == (
        f"mcp-edge: configuration error: state.key_files: {keyfile} is not text (base64url keys, one a line)"
    )


# ---- serve: listening -------------------------------------------------------------------------


def test_serve_on_a_port_in_use(held_port: int):
    line = one_line(
        cli(*SERVE, "--port", str(held_port), env=clean_env(MCP_EDGE_STATE_KEYS=generate_key())),
        exits.LISTEN,
    )
    assert (
        line == f"mcp-edge: cannot listen on 127.0.0.1:{held_port} (public): Address already in use"
    )


def test_serve_with_a_cluster_port_in_use(tmp_path: Path, held_port: int):
    config = config_file(tmp_path, {"cluster": {"listen": {"port": held_port}}})
    line = one_line(
        cli(
            *SERVE,
            "--port",
            "0",
            "--config",
            str(config),
            env=clean_env(MCP_EDGE_STATE_KEYS=generate_key()),
        ),
        exits.LISTEN,
    )
    assert (
        line
        == f"mcp-edge: cannot listen on 127.0.0.1:{held_port} (cluster): Address already in use"
    )


def test_serve_on_an_address_not_of_this_host():
    line = one_line(
        cli(
            *SERVE,
            "--host",
            "192.0.2.1",
            "--port",
            "0",
            env=clean_env(MCP_EDGE_STATE_KEYS=generate_key()),
        ),
        exits.LISTEN,
    )
    assert (
        line == "mcp-edge: cannot listen on 192.0.2.1:0 (public): Cannot assign requested address"
    )


LISTENING = re.compile(r"^mcp-edge \S+ listening on (http://127\.0\.0\.1:(\d+)) \(")


def connects(port: int) -> bool:
    """One connection attempt, no retry."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    "workers,kernel_port", [(1, False), (2, True)], ids=["1-worker", "2-workers-port-0"]
)
def test_serve_says_listening_once_it_is_and_stops_on_ctrl_c(workers: int, kernel_port: bool):
    """The listening line is printed once a connection to the URL it names succeeds (with port 0,
    the URL names the port the kernel picked); Ctrl-C then stops it: exit code 130, one line."""
    env = clean_env(MCP_EDGE_STATE_KEYS=generate_key())
    port = 0 if kernel_port else free_port()
    argv = [*CLI, *SERVE, "--port", str(port), "--workers", str(workers)]
    with WatchedProcess(argv, env=env) as proc:
        line = proc.wait_for_line("stderr", LISTENING.match, timeout=120)
        listening = int(LISTENING.match(line)[2])  # type: ignore[index]
        assert connects(listening), (
            f"nothing accepts on {listening} when the line is read:\n{proc.output()}"
        )
        assert listening != 0 and (kernel_port or listening == port), line
        assert line.endswith(f"; {workers} worker(s))"), line
        proc.signal_group(signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        assert proc.wait(60) == exits.INTERRUPTED, proc.output()
    no_traceback(proc.output())
    assert proc.lines["stderr"][-1] == "mcp-edge: interrupted (Ctrl-C)", proc.output()
    assert sum("interrupted" in ln for ln in proc.lines["stderr"]) == 1, proc.output()


# ---- demo -------------------------------------------------------------------------------------


def test_demo_on_a_port_in_use(held_port: int):
    line = one_line(cli("demo", "--port", str(held_port)), exits.LISTEN)
    assert (
        line == f"mcp-edge: cannot listen on 127.0.0.1:{held_port} (public): Address already in use"
    )


# ---- usage ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,says",
    [
        (
            [],
            "mcp-edge: a command is required: serve, demo, keys, tools, grants, check-config, try (see: mcp-edge --help)",
        ),
        (["bogus"], "mcp-edge: argument COMMAND: invalid choice: 'bogus'"),
        (["keys"], "mcp-edge: keys: an action is required: generate (see: mcp-edge keys --help)"),
        (
            ["tools"],
            "mcp-edge: tools: an action is required: digests, accept (see: mcp-edge tools --help)",
        ),
        (
            ["keys", "generate", "--count", "0"],
            "mcp-edge: keys generate: argument --count: invalid positive integer value: '0'",
        ),
        (["serve", "--port", "abc"], "mcp-edge: serve: argument --port: invalid int value: 'abc'"),
        (["serve", "--port"], "mcp-edge: serve: argument --port: expected one argument"),
        (
            ["tools", "accept", "--route", "r"],
            "mcp-edge: tools accept: the following arguments are required: --tool",
        ),
        (
            ["try", "--timeout", "-1"],
            "mcp-edge: try: argument --timeout: invalid positive number value: '-1'",
        ),
        (["serve", "--bogus"], "mcp-edge: unrecognized arguments: --bogus"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_usage_errors(args: list[str], says: str):
    assert one_line(cli(*args), exits.USAGE).startswith(says)


def test_every_exit_code_is_in_the_help_and_the_manual():
    result = cli("--help")
    assert result.code == 0 and result.err == "", result
    manual = (REPO_ROOT / "docs" / "index.md").read_text()
    for code, meaning in exits.TABLE:
        assert re.search(rf"^  {code} +{re.escape(meaning[:40])}", result.out, re.MULTILINE), (
            code,
            result.out,
        )
        assert f"| {code} | {meaning} |" in manual, (code, meaning)


# ---- a sweep over bad argv: never a traceback ---------------------------------------------------


@pytest.fixture(scope="module")
def sweep_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "dir.yaml").mkdir()
    (tmp / "binary.yaml").write_bytes(b"\xff\x00\xfe")
    (tmp / "broken.yaml").write_text("routes: [\n")
    write_private(tmp / "unknown-key.yaml", "listen: {prot: 1}\n")
    route = {"name": "r", "upstream": "http://127.0.0.1:1/mcp", "legacy_clients": "deny"}
    write_private(
        tmp / "ok.yaml", yaml.safe_dump({"auth": {"mode": "anonymous"}, "routes": [route]})
    )
    redis = {"type": "redis", "url": "redis://127.0.0.1:1/0", "timeout_seconds": 0.2}
    pinned = {**route, "policy": {"pin_tools": True}}
    write_private(tmp / "redis.yaml", yaml.safe_dump({"store": redis, "routes": [pinned]}))
    return {p.name: str(p) for p in tmp.iterdir()} | {"missing.yaml": str(tmp / "missing.yaml")}


FILES = [
    "dir.yaml",
    "binary.yaml",
    "broken.yaml",
    "unknown-key.yaml",
    "ok.yaml",
    "redis.yaml",
    "missing.yaml",
]
URLS = [
    "http://127.0.0.1:1/mcp",
    "https://127.0.0.1:1/mcp",
    "http://no-such-host.invalid/mcp",
    "ftp://x",
    "http://",
    "127.0.0.1:3001/mcp",
    "http://[::1/mcp",
    "http://127.0.0.1:99999/mcp",
    "",
]
NUMBERS = ["0", "1", "2", "-1", "70000", "abc", "1e999", "nan", ""]
HOSTS = [
    "127.0.0.1",
    "0.0.0.0",
    "localhost",
    "",
    "192.0.2.1",
    "nosuch.invalid",
    "a" * 300,
    "é",
    "-1",
]
NAMES = ["r", "nope", "", "é"]
#: Each command's options, with values good and bad (None: a flag without a value).
OPTIONS: dict[tuple[str, ...], dict[str, list[str] | None]] = {
    ("serve",): {
        "--config": FILES,
        "--upstream": URLS,
        "--command": ["python -V", "'unclosed", "", "/nonexistent"],
        "--host": HOSTS,
        "--port": NUMBERS,
        "--workers": NUMBERS,
        "--anonymous": None,
    },
    ("demo",): {"--host": HOSTS, "--port": NUMBERS},
    ("keys", "generate"): {"--count": NUMBERS},
    ("tools", "digests"): {"--config": FILES, "--route": NAMES},
    ("tools", "accept"): {
        "--config": FILES,
        "--route": NAMES,
        "--tool": NAMES,
        "--digest": ["sha256:" + "0" * 64, "sha256:xyz", ""],
    },
    ("check-config",): {"--config": FILES, "--probe": None},
    ("try",): {"--token": ["t", ""], "--timeout": NUMBERS},
    ("keys",): {},
    ("tools",): {},
    ("nope",): {},
    (): {},
}
STRAYS = ["--bogus", "-x", "--", "extra", "--help-me", "--config"]


#: Options each command gets in every example (with any of their values).
REQUIRED = {("tools", "digests"): ["--route"], ("tools", "accept"): ["--route", "--tool"]}


@st.composite
def bad_argv(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """A command, some of its options with values good and bad, maybe a stray token."""
    command = draw(st.sampled_from(sorted(OPTIONS)))
    options = OPTIONS[command]
    argv = list(command)
    chosen = REQUIRED.get(command, []) + (
        draw(st.lists(st.sampled_from(sorted(options)), max_size=4)) if options else []
    )
    for flag in draw(st.permutations(chosen)):
        values = options[flag]
        argv += [flag] if values is None else [flag, draw(st.sampled_from(values))]
    if command == ("try",):
        argv.append(draw(st.sampled_from(URLS)))
    if draw(st.integers(0, 4)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(STRAYS)))
    return list(command), argv


def poison(command: list[str], held: int) -> list[str]:
    """What keeps a command from running for good: ``serve`` gets no state key (the others do),
    ``demo`` a port in use, ``try`` a short timeout (and no URL that answers)."""
    if command == ["demo"]:
        return ["--port", str(held)]
    if command == ["try"]:
        return ["--timeout", "2"]
    return []


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=bad_argv())
def test_no_argv_ever_gets_a_traceback(
    sweep_files: dict[str, str], held_port: int, case: tuple[list[str], list[str]]
):
    command, argv = case
    argv = [sweep_files.get(t, t) for t in argv] + poison(command, held_port)
    env = clean_env() if command == ["serve"] else clean_env(MCP_EDGE_STATE_KEYS=generate_key())
    result = cli(*argv, env=env)
    no_traceback(result)
    assert result.code in (
        exits.OK,
        exits.FAILED,
        exits.USAGE,
        exits.LISTEN,
        exits.UNREACHABLE,
    ), (argv, result)
    if result.code != exits.OK:
        lines = result.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("mcp-edge: "), (argv, result)
