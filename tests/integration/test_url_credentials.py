"""No password in anything the gateway prints: every URL-valued setting holds credentials, and
every output of a run is searched for the password: ``check-config`` and its ``--probe``, the
start-up line, every log line (debug level, the access log on), error bodies, ``/readyz``,
``/metrics`` (its labels), and the errors of settings that are refused.

The URL-valued settings are found in the configuration models (by name), so that a new one
without a case here fails :func:`test_every_url_setting_has_a_case`. Those a gateway publishes
or names itself by (``gateway.public_url``, ``cluster.advertise_url``, the metadata's
``authorization_servers``, ``resource_documentation``, the JWT ``issuer``, the authorization
servers of upstream identity and of the consent sign-in) refuse credentials;
the others (upstreams, the store, the JWKS, the trace collector) take them and print them
redacted (``mcp_edge.core.urls.redact``).
"""

from __future__ import annotations

import base64
import json
import secrets
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import BaseModel

from mcp_edge.server.config import GatewayConfig
from tests.support.processes import (
    ManagedProcess,
    free_port,
    run_bounded,
    venv_command,
    wait_for_port,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PASSWORD = "pw-" + secrets.token_hex(8)
MODERN = "2026-07-28"


def with_credentials(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://user:{PASSWORD}@{rest}"


def closed_port() -> int:
    return free_port()  # (nothing listens on it: every connection is refused)


#: Settings that take a URL with credentials (and print it redacted), by path in the models.
TAKEN = (
    "routes.upstream",
    "routes.endpoints",
    "routes.members.upstream",
    "routes.members.endpoints",
    "store.url",
    "auth.jwt.jwks_url",
    "observability.tracing.endpoint",
)
#: Settings whose URL the gateway publishes or names itself by: credentials are refused.
REFUSED: dict[str, dict[str, Any]] = {
    "gateway.public_url": {"gateway": {"public_url": with_credentials("https://mcp.example.com")}},
    "cluster.advertise_url": {
        "cluster": {"advertise_url": with_credentials("http://10.0.0.1:9090")}
    },
    "auth.authorization_servers": {
        "auth": {
            "mode": "anonymous",
            "authorization_servers": [with_credentials("https://idp.example")],
        }
    },
    "auth.resource_documentation": {
        "auth": {
            "mode": "anonymous",
            "resource_documentation": with_credentials("https://docs.example/mcp"),
        }
    },
    "auth.jwt.issuer": {
        "auth": {
            "mode": "jwt",
            "jwt": {
                "issuer": with_credentials("https://idp.example"),
                "jwks_url": "https://idp.example/jwks",
            },
        }
    },
}
_JWT = {
    "mode": "jwt",
    "jwt": {"issuer": "https://idp.example", "jwks_url": "https://idp.example/jwks"},
}
_CLIENT = {"client_id": "gw", "method": "client_secret_basic", "secret_env": "AS_SECRET"}
_SIGN_IN = {
    "issuer": "https://idp.example",
    "client": {"client_id": "c", "secret_env": "AS_SECRET"},
}


def _identity(section: str, key: str, *, member: bool, creds: bool = True) -> dict[str, Any]:
    """A route (or its one member) whose ``upstream_auth.<section>`` has ``key`` (with
    credentials unless ``creds`` is false)."""
    server: dict[str, Any] = {"issuer": "https://as.example", "client": _CLIENT}
    if section == "token_exchange":
        server["audience"] = ["https://up.example"]
    url = "https://as.example" + ("/token" if key == "token_endpoint" else "")
    server[key] = with_credentials(url) if creds else url
    if section == "token_exchange" and key == "token_endpoint":
        del server["issuer"]
    auth = {"upstream_auth": {section: server}}
    upstream = {"upstream": "https://up.example/mcp", "era": "modern", **auth}
    route = (
        {"name": "fed", "path": "/mcp", "members": [{"name": "a", **upstream}]}
        if member
        else upstream
    )
    doc: dict[str, Any] = {"auth": _JWT, "routes": [route]}
    if section == "oauth":
        doc |= {
            "gateway": {"public_url": "https://mcp.example.com"},
            "consent": {"sign_in": _SIGN_IN},
        }
    return doc


for _section in ("token_exchange", "oauth"):
    for _key in ("issuer", "token_endpoint"):
        REFUSED[f"routes.upstream_auth.{_section}.{_key}"] = _identity(_section, _key, member=False)
        REFUSED[f"routes.members.upstream_auth.{_section}.{_key}"] = _identity(
            _section, _key, member=True
        )
for _key in ("issuer", "token_endpoint"):
    REFUSED[f"consent.sign_in.{_key}"] = {
        **_identity("oauth", "issuer", member=False, creds=False),
        "consent": {
            "sign_in": {
                **_SIGN_IN,
                _key: with_credentials(
                    "https://idp.example" + ("/token" if _key == "token_endpoint" else "")
                ),
            }
        },
    }
_URL_NAMES = (
    "url",
    "urls",
    "endpoint",
    "endpoints",
    "upstream",
    "issuer",
    "servers",
    "documentation",
)


def url_settings() -> set[str]:
    """Every setting of the configuration whose name says it holds a URL, and whose value can
    be a string."""
    found: set[str] = set()

    def models(tp: Any) -> Iterator[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            yield tp
        for arg in typing.get_args(tp):
            yield from models(arg)

    def strings(tp: Any) -> bool:
        return tp is str or any(strings(arg) for arg in typing.get_args(tp))

    def walk(model: type[BaseModel], prefix: str, seen: set[type[BaseModel]]) -> None:
        for name, field in model.model_fields.items():
            path = f"{prefix}.{name}" if prefix else name
            if name.split("_")[-1] in _URL_NAMES and strings(field.annotation):
                found.add(path)
            for sub in models(field.annotation):
                if sub not in seen:
                    walk(sub, path, seen | {sub})

    walk(GatewayConfig, "", {GatewayConfig})
    return found


def test_every_url_setting_has_a_case() -> None:
    assert url_settings() == set(TAKEN) | set(REFUSED)


def check_config(tmp: Path, doc: dict[str, Any], *args: str, env: dict[str, str]) -> str:
    path = tmp / f"config-{secrets.token_hex(4)}.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    done = run_bounded(
        [*venv_command("mcp-edge"), "check-config", "--config", str(path), *args],
        timeout=60,
        env=env,
    )
    assert not done.timed_out, done.output
    return f"exit {done.returncode}\n{done.output}"


@pytest.mark.parametrize("setting", sorted(REFUSED))
def test_a_published_url_refuses_credentials_without_printing_them(
    setting: str, tmp_path: Path, state_key: str
) -> None:
    doc = {"auth": {"mode": "anonymous"}, "routes": [{"upstream": "http://127.0.0.1:9/mcp"}]}
    for section, value in REFUSED[setting].items():
        doc[section] = value if isinstance(value, list) else {**doc.get(section, {}), **value}
    out = check_config(tmp_path, doc, env={"MCP_EDGE_STATE_KEYS": state_key, "AS_SECRET": "s" * 32})
    assert out.startswith("exit 2\n"), out
    assert "holds credentials" in out and "***@" in out, out
    assert PASSWORD not in out


def test_a_bad_jwks_url_is_refused_without_printing_its_password(
    tmp_path: Path, state_key: str
) -> None:
    doc = {
        "gateway": {"public_url": "https://mcp.example.com"},
        "auth": {
            "mode": "jwt",
            "jwt": {
                "issuer": "https://idp.example",
                "jwks_url": with_credentials("ftp://idp.example/jwks"),
            },
        },
        "routes": [{"upstream": "http://127.0.0.1:9/mcp"}],
    }
    out = check_config(tmp_path, doc, env={"MCP_EDGE_STATE_KEYS": state_key})
    assert out.startswith("exit 2\n") and "jwks_url" in out, out
    assert PASSWORD not in out


class Run:
    """Everything one run printed and answered."""

    def __init__(self) -> None:
        self.outputs: dict[str, str] = {}

    def add(self, name: str, text: str) -> None:
        self.outputs[name] = self.outputs.get(name, "") + text + "\n"

    def leaks(self) -> list[str]:
        return [name for name, text in self.outputs.items() if PASSWORD in text]


def gateway_config(kind: str) -> dict[str, Any]:
    """``anonymous``: credentials in every URL an anonymous gateway may take; ``jwt``: in the
    JWKS URL of a JWT gateway."""
    dead = lambda: with_credentials(f"http://127.0.0.1:{closed_port()}/mcp")  # noqa: E731
    routes: list[dict[str, Any]] = [
        {"name": "one", "path": "/mcp", "upstream": dead(), "era": "modern", "single_use": True},
        {"name": "two", "path": "/two", "endpoints": [dead(), dead()]},
        {
            "name": "fed",
            "path": "/fed",
            "members": [{"name": "a", "upstream": dead()}, {"name": "b", "endpoints": [dead()]}],
        },
    ]
    logging = {"level": "debug", "access_log": True}
    listen = {"drain_seconds": 0}
    if kind == "jwt":
        return {
            "gateway": {"public_url": "http://127.0.0.1:1"},
            "auth": {
                "mode": "jwt",
                "jwt": {
                    "issuer": "https://idp.example",
                    "jwks_url": with_credentials(f"http://127.0.0.1:{closed_port()}/jwks"),
                    "jwks_min_refresh_seconds": 1,
                },
            },
            "logging": logging,
            "listen": listen,
            "routes": routes[:1],
        }
    return {
        "auth": {"mode": "anonymous"},
        "store": {"type": "redis", "url": with_credentials(f"redis://127.0.0.1:{closed_port()}/0")},
        "observability": {
            "tracing": {
                "enabled": True,
                "endpoint": with_credentials(f"http://127.0.0.1:{closed_port()}/v1/traces"),
            }
        },
        "cache": {"backend": "redis"},
        "logging": logging,
        "listen": listen,
        "routes": [{**routes[0], "cache": {"enabled": True}}, *routes[1:]],
    }


def _b64(doc: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


#: A token naming a key the gateway has not got: it fetches the JWK Set (which fails).
UNKNOWN_KEY_TOKEN = f"{_b64({'alg': 'RS256', 'kid': 'k1', 'typ': 'JWT'})}.{_b64({'sub': 'a'})}.c2ln"


def call(name: str = "survey") -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": meta},
    }


def headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    out = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **extra,
    }
    if name:
        out["Mcp-Name"] = name
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """check-config, check-config --probe and serve, of both gateways; the requests each route
    answers (every upstream refuses connections), its admin endpoints."""
    tmp = tmp_path_factory.mktemp("credentials")
    env = {"MCP_EDGE_STATE_KEYS": secrets.token_urlsafe(32)}
    result = Run()
    for kind in ("anonymous", "jwt"):
        doc = gateway_config(kind)
        result.add(f"{kind} check-config", check_config(tmp, doc, env=env))
        result.add(f"{kind} check-config --probe", check_config(tmp, doc, "--probe", env=env))
        port = free_port()
        path = tmp / f"{kind}.yaml"
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        argv = [*venv_command("mcp-edge"), "serve", "--config", str(path), "--port", str(port)]
        log = tmp / f"{kind}.log"
        with ManagedProcess(kind, argv, log_path=log, env=env) as proc:
            wait_for_port(port, timeout=60, process=proc)
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=15, trust_env=False
            ) as c:
                token = {"Authorization": f"Bearer {UNKNOWN_KEY_TOKEN}"} if kind == "jwt" else {}
                for route in ("/mcp", "/two", "/fed"):
                    for body, head in (
                        (call(), headers("tools/call", "survey", **token)),
                        (
                            {**call(), "method": "tools/list", "params": call()["params"]},
                            headers("tools/list", **token),
                        ),
                    ):
                        answer = c.post(route, json=body, headers=head)
                        result.add(f"{kind} {route} body", f"{answer.status_code} {answer.text}")
                        result.add(f"{kind} {route} headers", json.dumps(dict(answer.headers)))
                for admin in ("/readyz", "/healthz", "/metrics"):
                    result.add(f"{kind} {admin}", c.get(admin).text)
        result.add(f"{kind} serve output", log.read_text(errors="replace"))
    return result


def test_no_output_of_a_run_holds_a_password(run: Run) -> None:
    assert run.leaks() == [], {name: run.outputs[name][-3000:] for name in run.leaks()}


def test_the_run_printed_the_urls_it_names_redacted(run: Run) -> None:
    """(What the search above would pass vacuously without: the URLs are there, redacted.)"""
    assert "***@127.0.0.1" in run.outputs["anonymous serve output"]  # the start-up line, the logs
    assert "***@127.0.0.1" in run.outputs["anonymous check-config --probe"]
    assert "upstream error" in run.outputs["anonymous serve output"]
    assert "JWKS" in run.outputs["jwt serve output"] or "jwks" in run.outputs["jwt serve output"]
