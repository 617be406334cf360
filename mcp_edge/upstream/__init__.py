"""The upstream adapters, one package per kind of upstream: ``http`` (a 2026-07-28 Streamable HTTP
server), ``legacy`` (a 2025-era HTTP server, through the bridge), ``stdio`` (a local process).
Each keeps its wire logic sans-I/O and its transport thin."""
