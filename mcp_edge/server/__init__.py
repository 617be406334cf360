"""The top of the house: the root configuration (it composes the packages' sections), the wiring
of one ASGI application from it, and the ``mcp-edge`` command line."""
