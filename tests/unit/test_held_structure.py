"""Nothing is held for a caller that is not counted, by structure (mcp_edge.edge.body): a path
cannot forget the accounting.

- Every reader or collector of an answer takes a ``Reservation`` (a parameter named
  ``reservation``, annotated ``Reservation``, with no default): there is no uncounted variant to
  reach for. ``Reservation(None)`` (no budget) is for tests; the package always names a budget.
- Every place the package reads a body from a socket, a stream or a process (``read``,
  ``readany``, ``iter_any``, ``readline``, ...) or queues what it read (``Queue``, ``deque``)
  is one of :data:`READERS`, with what counts it (its kind) or bounds it. A new one fails here
  until it says which: count it with a ``Reservation`` of its kind, or bound it small and say
  so (and in docs/limits.md's table of what is held).
"""

from __future__ import annotations

import ast
from pathlib import Path

import mcp_edge

PACKAGE = Path(mcp_edge.__file__).parent

#: ``module:qualified name:call`` -> what counts or bounds what it reads or queues.
READERS = {
    # counted
    "mcp_edge.cluster.forward:Forwarder.forward:iter_any": "forwarded",
    "mcp_edge.upstream.legacy.http_session:EventStream.__init__:deque": "bridge (its reservation)",
    "mcp_edge.upstream.legacy.http_session:EventStream._read_body:readany": "bridge",
    "mcp_edge.upstream.legacy.http_session:EventStream.next:readany": "bridge",
    "mcp_edge.upstream.legacy.standalone:Standalone.__init__:deque": "bridge (its reservation)",
    "mcp_edge.upstream.stdio.process:CallStream.__init__:Queue": "bridge (CallStream.offer)",
    "mcp_edge.upstream.stdio.process:StdioInstance._read_messages:readline": (
        "one line per process, at most max_line_bytes, then counted in the call's queue"
    ),
    # streamed through: what the edge holds of it is counted there
    "mcp_edge.upstream.http.proxy:HttpProxy._relay:read": "streamed (the edge counts)",
    "mcp_edge.upstream.http.proxy:_read_unless_drained:read": "streamed (the edge counts)",
    "mcp_edge.upstream.http.client:UpstreamResponse.chunks:read": "streamed (the edge counts)",
    "mcp_edge.upstream.http.client:UpstreamResponse.__init__:deque": (
        "the connection is paused past HIGH_WATER (256 KiB)"
    ),
    "mcp_edge.cluster.relay:Relay.pass_on:iter_any": "streamed: aiohttp pauses past 128 KiB",
    # bounded small
    "mcp_edge.upstream.http.era:EraRouter.probe_endpoint:read": "64 KiB, one probe at a time",
    "mcp_edge.upstream.legacy.http_session:LegacyHttpSession._check:read": "4 KiB of an error",
    "mcp_edge.upstream.stdio.process:StdioInstance._read_stderr:readline": (
        "one line, logged cut to 2000 characters"
    ),
    "mcp_edge.upstream.inprocess:AppLifespan.__init__:Queue": "lifespan messages",
    # not a caller's answer
    "mcp_edge.auth.jwks:JwksKeySource._download:iter_any": "the key set, max_bytes",
    "mcp_edge.identity.asclient:AuthorizationServer._request:aiter_raw": (
        "an authorization server's answer, max_response_bytes"
    ),
    "mcp_edge.identity.prm:discover:aiter_raw": "protected-resource metadata, max_bytes",
    "mcp_edge.server.tryout:_post:iter_chunked": "mcp-edge try (a client, not the gateway)",
    "mcp_edge.policy.pins:MemoryPins.all:read": "pins (a store's read)",
    "mcp_edge.policy.pins:ToolPins.blocked:read": "pins (a store's read)",
    "mcp_edge.server.tools:_accept:read": "pins (a store's read)",
    "mcp_edge.ratelimit.memory:_Window.__init__:deque": "rate-limit spends",
    "mcp_edge.server.hardening:_read:read": "/proc files",
    "mcp_edge.upstream.stdio.containment:_children:read": "/proc files",
    "mcp_edge.upstream.stdio.containment:_own_cgroup_dir:read": "/proc files",
    "mcp_edge.upstream.stdio.containment:_started:read": "/proc files",
    "mcp_edge.upstream.stdio.containment:snapshot:read": "/proc files",
}

_READS = {
    *("read", "readany", "iter_any", "iter_chunked", "readline", "readexactly", "readuntil"),
    *("aread", "aiter_raw", "aiter_bytes", "aiter_text", "aiter_lines"),  # (httpx)
}
_HOLDERS = {"Queue", "deque"}


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out.append((name, ast.parse(path.read_text(), str(path))))
    return out


MODULES = _modules()


def _sites(module: str, tree: ast.Module) -> list[str]:
    """``module:qualified name:call`` of each read and queue in ``tree``."""
    found: list[str] = []

    def visit(node: ast.AST, where: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = [*where, node.name]
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _READS | _HOLDERS:
                found.append(f"{module}:{'.'.join(where)}:{func.attr}")
            elif isinstance(func, ast.Name) and func.id in _HOLDERS:
                found.append(f"{module}:{'.'.join(where)}:{func.id}")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, [])
    return found


def test_every_read_and_queue_is_counted_or_bounded():
    sites = {site for module, tree in MODULES for site in _sites(module, tree)}
    unknown = sorted(sites - READERS.keys())
    assert not unknown, (
        "reads or queues what a caller may be sent, with no word on what counts it: hold it with "
        "a Reservation of its kind (mcp_edge.edge.body.HELD_KINDS), or bound it small, and add "
        f"it to READERS (and to docs/limits.md): {unknown}"
    )
    assert not READERS.keys() - sites, f"gone: {sorted(READERS.keys() - sites)}"


def _optional(annotation: ast.expr | None) -> bool:
    return annotation is None or not (
        isinstance(annotation, ast.Name) and annotation.id == "Reservation"
    )


def test_no_reader_takes_its_reservation_as_optional():
    loose = []
    for module, tree in MODULES:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            defaults = dict(
                zip(
                    [a.arg for a in positional[len(positional) - len(args.defaults) :]],
                    args.defaults,
                    strict=True,
                )
            )
            defaults.update(
                {
                    a.arg: d
                    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                    if d is not None
                }
            )
            for arg in [*positional, *args.kwonlyargs]:
                if arg.arg == "reservation" and (_optional(arg.annotation) or arg.arg in defaults):
                    loose.append(f"{module}:{node.name}")
    assert not loose, f"a reservation that may be left out (an uncounted variant): {loose}"


def test_the_package_always_names_a_budget():
    unbudgeted = [
        f"{module}:{node.lineno}"
        for module, tree in MODULES
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Reservation"
        and (
            not node.args or (isinstance(node.args[0], ast.Constant) and node.args[0].value is None)
        )
    ]
    assert not unbudgeted, f"Reservation(None) outside the tests: {unbudgeted}"
