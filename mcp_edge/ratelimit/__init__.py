"""Rate limits per route, per principal and per tool (see ``limiter`` and ``rules``)."""
