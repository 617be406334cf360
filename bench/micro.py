"""Micro-benchmarks of per-request work: sealing and opening the gateway's ``requestState``
(``mcp_edge.core.seal``), verifying a bearer JWT with an already-parsed key (PyJWT, RS256 and
ES256), which is what the gateway does per request once the JWKS is cached, refusing bodies
parsers may read differently (``mcp_edge.core.strict_json``, run on every body after the orjson
parse, next to the parse itself), and recording a request's metrics (the HTTP-view counter and
histogram, and the OpenTelemetry-named ``mcp_server_operation_duration_seconds``), tracing off.

    uv run python -m bench.micro [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mcp_edge.core.digest import request_digest
from mcp_edge.core.seal import (
    Binding,
    KeyRing,
    StateKey,
    b64u_encode,
    new_claims,
    open_state,
    seal,
    verify_binding,
)

SECRET = b"mcp-edge-bench/micro/state-secret/0123456789"


def timeit(fn: Callable[[], Any], *, min_time: float, repeat: int = 5) -> dict[str, float]:
    """Best and median per-call time (µs) of ``repeat`` batches, each at least ``min_time`` s."""
    fn()
    n = 1
    while True:  # size a batch
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / 4 or n > 1 << 24:
            break
        n *= 2
    n = max(1, int(n * (min_time / max(dt, 1e-9))))
    per_call = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per_call.append((time.perf_counter() - t0) / n * 1e6)
    per_call.sort()
    return {
        "best_us": round(per_call[0], 2),
        "median_us": round(per_call[len(per_call) // 2], 2),
        "n": n,
    }


def _params() -> dict[str, Any]:
    return {
        "name": "book_table",
        "arguments": {"date": "2026-12-24", "party": 4, "notes": "window seat, please"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    }


def run(quick: bool = False) -> dict[str, Any]:
    min_time = 0.01 if quick else 0.25
    repeat = 3 if quick else 5
    ring = KeyRing([StateKey.from_secret(SECRET)])
    params = _params()
    binding = Binding(
        audience="mcp-edge/default",
        principal_id="https://issuer.example|user-1234",
        method="tools/call",
        target="book_table",
        digest=b64u_encode(request_digest("tools/call", params)),
    )
    upstream_state = "v1." + "A" * 250  # an SDK-sealed upstream state rides inside ours
    now = time.time()

    def make_claims():  # noqa: ANN202
        return new_claims(
            ring,
            binding,
            now=now,
            ttl=600,
            input_keys=["colour"],
            round_number=1,
            upstream_state=upstream_state,
            endpoint="http://127.0.0.1:3001/mcp",
        )

    claims = make_claims()
    token = seal(ring, claims)

    def seal_op() -> None:
        seal(ring, make_claims())

    def open_op() -> None:
        c, key = open_state(ring, token, now=now)
        verify_binding(c, key, binding, max_rounds=16)

    def digest_op() -> None:
        request_digest("tools/call", params)

    results: dict[str, Any] = {
        "seal (new claims + AES-GCM seal)": timeit(seal_op, min_time=min_time, repeat=repeat),
        "open (AES-GCM open + verify binding)": timeit(open_op, min_time=min_time, repeat=repeat),
        "request digest (RFC 8785 + SHA-256)": timeit(digest_op, min_time=min_time, repeat=repeat),
    }
    results["_token_chars"] = len(token)

    # JWT: verify signature + exp/iat/iss/aud with a key object built once (a cached JWKS entry).
    payload = {
        "iss": "https://issuer.example",
        "sub": "user-1234",
        "aud": "https://mcp.example/mcp",
        "iat": int(now),
        "exp": int(now) + 3600,
        "scope": "mcp:tools",
    }
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    decoder = jwt.PyJWT()
    for alg, private in (("RS256", rsa_key), ("ES256", ec_key)):
        encoded = jwt.encode(payload, private, algorithm=alg, headers={"kid": "k1"})
        public = private.public_key()
        # The gateway's verifier hands PyJWT a PyJWK-built key object; build it once here too.
        pyjwk = jwt.PyJWK.from_dict(
            json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(public)), alg
        )

        def verify(encoded: str = encoded, key: Any = pyjwk.key, alg: str = alg) -> None:
            decoder.decode(
                encoded,
                key,
                algorithms=[alg],
                audience=payload["aud"],
                issuer=payload["iss"],
                options={"require": ["exp", "iss", "sub"]},
            )

        results[f"JWT {alg} decode+verify (cached key)"] = timeit(
            verify, min_time=min_time, repeat=repeat
        )
    results.update(_strict_json(min_time, repeat))
    results.update(metrics_cost(min_time, repeat))
    return results


def _strict_json(min_time: float, repeat: int) -> dict[str, Any]:
    """orjson's parse of a body, and the duplicate-name / integer / depth check on top of it."""
    import orjson

    from mcp_edge.core import strict_json

    meta = _params()["_meta"]

    def body(method: str, **params: Any) -> bytes:
        return orjson.dumps(
            {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}
        )

    bodies = {
        "tools/call, 300 B": body(
            "tools/call", **{k: v for k, v in _params().items() if k != "_meta"}
        ),
        "resources/read, a URI (':' in a string: exact pass)": body(
            "resources/read", uri="file:///srv/data/report.txt"
        ),
        "84 KB of 1500 small objects": body(
            "tools/call",
            name="t",
            arguments={
                "rows": [
                    {"id": i, "name": f"row {i}", "tags": ["a", "b"], "v": i * 1.5}
                    for i in range(1500)
                ]
            },
        ),
        "4 MB string argument": body("tools/call", name="t", arguments={"blob": "x" * 4_000_000}),
    }
    out: dict[str, Any] = {}
    for name, raw in bodies.items():
        doc = orjson.loads(raw)
        out[f"JSON parse (orjson), {name}"] = timeit(
            lambda raw=raw: orjson.loads(raw), min_time=min_time, repeat=repeat
        )
        out[f"strict JSON check, {name}"] = timeit(
            lambda raw=raw, doc=doc: strict_json.check(raw, doc), min_time=min_time, repeat=repeat
        )
    return out


def metrics_cost(min_time: float, repeat: int) -> dict[str, Any]:
    """What observation records when a request ends, with tracing off: the HTTP-view series alone
    (what it recorded before ``mcp_server_operation_duration_seconds``), and the whole record as
    observe makes it (the OpenTelemetry-named histogram added; labels resolved once per kind of
    request)."""
    from mcp_edge.core.jsonrpc import Message
    from mcp_edge.edge.context import RequestContext
    from mcp_edge.edge.observe import ObserveMiddleware, _Observed, metric_method
    from mcp_edge.edge.responses import Outcome
    from mcp_edge.observability.metrics import Metrics

    observe = ObserveMiddleware(lambda *a: None, route="default", metrics=Metrics())
    scope = {
        "type": "http",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"mcp-protocol-version", b"2026-07-28"),
            (b"mcp-method", b"tools/call"),
            (b"mcp-name", b"book_table"),
        ],
    }
    ctx = RequestContext(
        modern=True,
        outcome=Outcome(completed=True),
        rpc=Message(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "book_table"}}
        ),
    )
    request_seconds = observe._request_seconds

    async def client(message: Any) -> None:
        pass

    observed = _Observed(client, b"uid", 0.0, request_seconds)
    observed.status = 200

    def http_view() -> None:
        counter = observe._counters.get((metric_method("tools/call"), 200))
        if counter is None:  # resolved on first use, as observe does
            observe._recorder("tools/call", None, 200, None, False, True, "2026-07-28")
        else:
            counter.inc()
        request_seconds.observe(0.0012)

    def with_operation() -> None:
        request_seconds.observe(0.0012)
        observe._record(scope, ctx, observed, 0.0)

    return {
        "metrics per request: HTTP view only (before)": timeit(
            http_view, min_time=min_time, repeat=repeat
        ),
        "metrics per request: + mcp_server_operation_duration": timeit(
            with_operation, min_time=min_time, repeat=repeat
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for name, value in run(args.quick).items():
        if isinstance(value, dict):
            print(f"{name:45s} {value['median_us']:9.2f} µs/op (best {value['best_us']:.2f})")


if __name__ == "__main__":
    main()
