#!/usr/bin/env bash
# The package as users install it: build the wheel (into dist/, where tests/integration/test_wheel.py
# takes it), install it into a clean virtual environment (no dev dependencies, no extras), and
# check that the `mcp-edge` command and `import mcp_edge` work without any extra, and that
# `mcp-edge serve` and `mcp-edge demo` then say in one line which extra they need.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'check-wheel: %s\n' "$*" >&2; exit 1; }

rm -f dist/mcp_edge-*.whl
uv build --wheel --quiet --out-dir dist
wheel=$(ls dist/mcp_edge-*.whl)
uv venv --quiet --python 3.11 "$tmp/venv"
VIRTUAL_ENV="$tmp/venv" uv pip install --quiet "$wheel"   # pip-compatible, from uv's cache
bin="$tmp/venv/bin"

"$bin/mcp-edge" --version | grep -q '^mcp-edge ' || fail "mcp-edge --version"
key=$("$bin/mcp-edge" keys generate)
MCP_EDGE_STATE_KEYS="$key" "$bin/python" - <<'PY' || fail "import mcp_edge"
import importlib.util

from mcp_edge import Edge, EdgeConfigError, __version__

for extra in ("mcp", "uvicorn", "httptools", "uvloop", "redis", "cel", "opentelemetry"):
    assert importlib.util.find_spec(extra) is None, f"{extra} is installed without its extra"


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

one_line_naming() {  # COMMAND... : exits 2 with one line naming mcp-edge[$extra]
  local extra=$1; shift
  set +e
  out=$("$@" 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$* without the $extra extra exited $rc: $out"
  [[ $(printf '%s\n' "$out" | wc -l) -eq 1 && $out == *"mcp-edge[$extra]"* ]] \
    || fail "$* without the $extra extra did not say what it needs in one line: $out"
}
one_line_naming demo "$bin/mcp-edge" demo --port 0
one_line_naming serve env MCP_EDGE_STATE_KEYS="$key" "$bin/mcp-edge" serve --anonymous \
  --upstream http://127.0.0.1:9/mcp --port 0
echo "check-wheel: $(basename "$wheel"): the command, the import and the extras' one-line errors: ok"
