"""Local (stdio) servers the gateway runs: the processes and their sandbox, and the front that
serves 2025-era clients over the same processes (2026-07-28 clients go through the legacy bridge)."""
