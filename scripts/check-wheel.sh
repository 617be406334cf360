#!/usr/bin/env bash
# The package as users install it: build the wheel, install it into a clean virtual environment
# (no dev dependencies, no extras), and check that the `mcp-edge` command and `import mcp_edge`
# work without the MCP SDK, and that `mcp-edge demo` then says in one line what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'check-wheel: %s\n' "$*" >&2; exit 1; }

uv build --wheel --quiet --out-dir "$tmp/dist"
uv venv --quiet --python 3.11 "$tmp/venv"
VIRTUAL_ENV="$tmp/venv" uv pip install --quiet "$tmp"/dist/*.whl   # pip-compatible, from uv's cache
bin="$tmp/venv/bin"

"$bin/mcp-edge" --version | grep -q '^mcp-edge ' || fail "mcp-edge --version"
key=$("$bin/mcp-edge" keys generate)
MCP_EDGE_STATE_KEYS="$key" "$bin/python" - <<'PY' || fail "import mcp_edge"
import importlib.util

from mcp_edge import Edge, EdgeConfigError, __version__

assert importlib.util.find_spec("mcp") is None, "the MCP SDK is installed without the demo extra"


async def app(scope, receive, send):  # any ASGI app
    pass


edge = Edge(app, anonymous=True)
assert edge.paths == ["/mcp"], edge.paths
try:
    Edge(app, anonymous=True, listen={"port": 9000})
except EdgeConfigError as exc:
    assert "applies to mcp-edge serve only" in str(exc), exc
else:
    raise AssertionError("a serve-only setting was accepted")
print(f"import mcp_edge {__version__}: ok")
PY

set +e
out=$("$bin/mcp-edge" demo --port 0 2>&1)
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "demo without the extra exited $rc: $out"
[[ $(printf '%s\n' "$out" | wc -l) -eq 1 && $out == *"mcp-edge[demo]"* ]] \
  || fail "demo without the extra did not say what it needs in one line: $out"
echo "check-wheel: $(basename "$tmp"/dist/*.whl): the command, the import and demo's one-line error: ok"
