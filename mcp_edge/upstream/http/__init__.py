"""A 2026-07-28 Streamable HTTP upstream: the pooled client of the hot path, the streaming proxy,
endpoints from DNS, and the router that sends a route's requests to the proxy or, for a server
of the 2025 era, to the legacy bridge."""
