"""Upstream adapters: where a checked request goes (an HTTP upstream, or an in-process ASGI app)."""
