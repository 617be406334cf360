"""The caller's own identity at an upstream: ``upstream_auth.token_exchange`` (RFC 8693) and
``upstream_auth.oauth`` (a user's own grant), on a route or a member.

The parts, each in its module (their docstrings give the stable API):

- ``config``: the ``upstream_auth`` model of a route and a member (:class:`UpstreamAuthConfig`)
  with the ``token_exchange`` and ``oauth`` sections, validated at start;
- ``vault``: the secret vault, sealed values under keyed-hash names, in memory or in the
  store's Redis (exchanged tokens, grants);
- ``flight``: one fetch in flight per key;
- ``asclient``: the gateway as an OAuth client of one authorization server (metadata discovery,
  token requests with its client authentication), bounded in size and time;
- ``layer``: the ASGI layer in front of a member that puts the caller's credential in the
  request's context (``ctx.upstream_bearer``), or answers instead;
- ``rules`` and ``exchange``: the token exchange (pure rules; the credential source);
- ``metrics``, ``wiring``: its metrics, and how the route stacks build it.

Authlib and httpx2 (the ``identity`` extra) are imported only when a member configures identity.
Policy does not import this package: what it needs goes through the request's context.
"""
