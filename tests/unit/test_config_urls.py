"""The upstream URLs of the configuration (``--upstream``, ``upstream:``, ``endpoints:``,
``cluster.advertise_url``): a URL the upstream client could not use is a configuration error at
start, one line naming the URL (credentials redacted) and what is wrong, exit 2; never a Python
message and exit 70 once the gateway builds its routes. A small fuzz: whatever is accepted, every
part of the gateway that reads an upstream URL takes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_edge import exits
from mcp_edge.core.seal import generate_key
from mcp_edge.sections import check_http_url
from mcp_edge.server.cli import main
from mcp_edge.server.config import ConfigError, load_config
from mcp_edge.upstream.http.client import parse_url
from mcp_edge.upstream.http.dns import DnsEndpoints, endpoint_urls

BAD = [
    ("http://127.0.0.1:99999/mcp", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:0/mcp", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:-1/mcp", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:abc/mcp", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:+80/mcp", "the port must be a number from 1 to 65535"),
    ("http://[::1]:70000/mcp", "the port must be a number from 1 to 65535"),
    ("http://h:80:80/mcp", "more than one ':'"),
    ("http://::1/mcp", "more than one ':'"),
    ("http://[::1/mcp", "'[' without its ']'"),
    ("http://[::1]x/mcp", "other than :port after the IPv6 host"),
    ("http://[not-v6]/mcp", "not an IPv6 address"),
    ("ftp://h/mcp", "must be an absolute http(s) URL"),
    ("h:3001/mcp", "must be an absolute http(s) URL"),
    ("http://", "no host"),
    ("http://h\u00e9llo.example/mcp", "non-ASCII"),
    ("http://h:\u0661\u0662/mcp", "non-ASCII"),
    ("http://exa mple/mcp", "a space"),
    ("http://h/mcp\n", "a control"),
    ("http://a..b/mcp", "not a host name"),
    ("http://-a/mcp", "not a host name"),
    ("http://%zz/mcp", "not a host name"),
    ("http://1.2.3.4.5/mcp", "not an IPv4 address"),
    ("http://" + "a" * 64 + "/mcp", "not a host name"),
]


@pytest.mark.parametrize(("url", "says"), BAD, ids=[repr(u)[:40] for u, _ in BAD])
def test_a_bad_upstream_url_is_named_with_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, env={}, flags={"upstream": url, "anonymous": True})
    message = str(info.value)
    assert message.startswith("routes.0.upstream: ") and says in message, message
    assert "\n" not in message


def test_credentials_in_an_upstream_url_are_not_shown() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, env={}, flags={"upstream": "http://edge:Zq9Qa/Xw7Wb#Kv@h:1/mcp"})
    message = str(info.value)
    assert "'http://***@h:1/mcp'" in message and "percent-encoded" in message
    assert "Zq9Qa" not in message and "Xw7Wb" not in message and "Kv" not in message


@pytest.mark.parametrize(
    "route",
    [
        "{name: a, upstream: 'http://h:99999/mcp', dns: true}",
        "{name: a, upstream: 'http://h:abc/mcp', dns: true}",
        "{name: a, endpoints: ['http://h:1/mcp', 'http://[::1]:65536/mcp']}",
        "{name: a, upstream: 'http://[::1]x/mcp', era: legacy}",
    ],
)
def test_check_config_ends_with_a_configuration_error_not_an_internal_one(
    route: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(f"auth: {{mode: anonymous}}\nroutes: [{route}]\n")
    config.chmod(0o600)
    monkeypatch.setenv("MCP_EDGE_STATE_KEYS", generate_key())
    assert main(["check-config", "--config", str(config)]) == exits.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("mcp-edge: configuration error: routes.0")


# ---------------------------------------------------------------- a little fuzz

_PIECES = {
    "scheme": ["http", "https", "HTTP", "ftp", "http:", ""],
    "userinfo": ["", "u@", "u:p@", "u:p/q@", "u:p#q@", "@"],
    "host": [
        "h",
        "127.0.0.1",
        "[::1]",
        "[::1",
        "::1",
        "[v1.x]",
        "[fe80::1%25eth0]",
        "a_b.svc",
        "a..b",
        "xn--n3h.com",
        "\u2603.com",
        "h\u200b",
        "999.1.1.1",
        "",
        " h",
    ],
    "port": [
        "",
        ":",
        ":80",
        ":0",
        ":65535",
        ":65536",
        ":99999999999999999999",
        ":abc",
        ":-1",
        ":8\u0660",
    ],
    "path": ["", "/", "/mcp", "/a b", "/m\u00e9", "?q=1", "#f", "/@x", "/mcp\r\n"],
}


@settings(max_examples=300, deadline=None)
@given(parts=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in _PIECES.items()}))
def test_whatever_is_accepted_every_reader_of_an_upstream_url_takes(parts: dict[str, str]) -> None:
    url = f"{parts['scheme']}://{parts['userinfo']}{parts['host']}{parts['port']}{parts['path']}"
    try:
        check_http_url(url)
    except ValueError as exc:
        assert str(exc).startswith("'") and "\n" not in str(exc)
        return
    origin = parse_url(url)  # the upstream client
    assert 0 < origin.port < 65536 and origin.host
    urlsplit(url).port  # noqa: B018  (the proxy's Host and the readiness probe)
    dns = DnsEndpoints("a", url, on_change=lambda urls: None)
    assert endpoint_urls(url, ["10.0.0.1", "::1"])
    assert 0 < dns.port < 65536
