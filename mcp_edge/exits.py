"""The ``mcp-edge`` command's exit codes, and the error that ends a command with one line.

A user's mistake or a dependency out of reach is never a traceback: the command raises
:class:`CommandError` (or :class:`gateway.config.ConfigError`) and ``gateway.cli.main`` prints one
line on stderr and exits with the code.
"""

from __future__ import annotations

OK = 0
#: The command ran and what it checked is wrong: ``try`` got no MCP answer or no complete round
#: trip, ``check-config --probe`` found an endpoint that is no MCP server, ``tools accept`` found
#: no definition to accept.
FAILED = 1
#: A usage or configuration error: an unknown command or option, a bad value, a config file that
#: cannot be read or is invalid, no state key, no authentication mode.
USAGE = 2
#: A listener cannot be bound: the address is in use or not this host's.
LISTEN = 3
#: A dependency cannot be reached: ``try``'s URL (connection refused, unknown host, no answer in
#: time), the store's Redis for ``tools``.
UNREACHABLE = 4
#: A bug: the line names the exception; please report it.
INTERNAL = 70
#: Stopped by Ctrl-C (SIGINT), after a graceful drain for ``serve`` and ``demo``.
INTERRUPTED = 130

#: (code, meaning) for the help text and the manual (docs/index.md).
TABLE = (
    (OK, "success"),
    (
        FAILED,
        (
            "the check failed: try got no MCP answer or no complete round trip; check-config --probe "
            "found an endpoint that is no MCP server; tools accept found nothing to accept"
        ),
    ),
    (
        USAGE,
        (
            "usage or configuration error: unknown option, bad value, unreadable or invalid config "
            "file, no state key, no authentication mode"
        ),
    ),
    (LISTEN, "cannot listen: the address is in use, or not this host's"),
    (UNREACHABLE, "a dependency cannot be reached: try's URL, the store's Redis for tools"),
    (INTERNAL, "internal error (a bug: the line names it)"),
    (INTERRUPTED, "interrupted by Ctrl-C (SIGINT)"),
)


class CommandError(Exception):
    """Ends the command: ``message`` is printed as one line on stderr, ``code`` is the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
