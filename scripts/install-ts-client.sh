#!/usr/bin/env bash
# Install the official MCP TypeScript client SDK (@modelcontextprotocol/client, exactly pinned)
# into .cache/ts-client/ (idempotent), together with the test driver's launcher, then print the
# path of that launcher: `ts-mcp-client [PLAN.json]` runs tests/clients/ts_mcp_client.mjs under
# Node 22 with the installed SDK.
#
# Needs only `npm` and the npm registry. Node 22 is the one scripts/install-conformance.sh
# installs (it is called first, so a bare machine gets both).
#
# Environment overrides:
#   TS_CLIENT_DIR      install root             (default: <repo>/.cache/ts-client)
#   TS_CLIENT_VERSION  @modelcontextprotocol/client version, exact (default: 2.4.0)
#   CONFORMANCE_DIR    where install-conformance.sh puts Node 22 (default: <repo>/.cache/conformance)
#
# Progress goes to stderr; stdout carries only the launcher path.
set -euo pipefail

installer=install-ts-client
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${TS_CLIENT_DIR:-$repo_root/.cache/ts-client}"
version="${TS_CLIENT_VERSION:-2.4.0}"
conformance_dir="${CONFORMANCE_DIR:-$repo_root/.cache/conformance}"
driver="$repo_root/tests/clients/ts_mcp_client.mjs"
# shellcheck source=lib/node-install.sh
source "$repo_root/scripts/lib/node-install.sh"

require_npm
[[ -f "$driver" ]] || die "driver not found: $driver"
[[ "$version" =~ ^2\.[0-9]+\.[0-9]+$ ]] || die "TS_CLIENT_VERSION must be an exact 2.x version, got '$version'"

use_node22 "$conformance_dir"

sdk_dir="$root/sdk"
install_pinned "$sdk_dir" mcp-edge-ts-client module "@modelcontextprotocol/client@$version"

# The driver stays in the repo (tests/clients/); the launcher tells it where the SDK's ES module
# entry is (MCP_TS_CLIENT_SDK, resolved through the package's own `exports`).
sdk_entry="$(cd "$sdk_dir" && "$node_bin" --input-type=module -e "
  import { fileURLToPath } from 'node:url';
  console.log(fileURLToPath(import.meta.resolve('@modelcontextprotocol/client')))")" \
  || die "cannot resolve @modelcontextprotocol/client in $sdk_dir"
program_launcher ts-mcp-client tests/clients/ts_mcp_client.mjs MCP_TS_CLIENT_DRIVER MCP_TS_CLIENT_SDK "$sdk_entry" \
  "runs the repo's TypeScript-SDK test driver under
Node 22 with @modelcontextprotocol/client@$version."

"$launcher" --version >/dev/null || die "the driver does not start under $node_bin"
log "ready: @modelcontextprotocol/client@$(installed_version "$sdk_dir" @modelcontextprotocol/client) on node $("$node_bin" --version)"
echo "$launcher"
