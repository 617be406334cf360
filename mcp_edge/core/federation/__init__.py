"""Federation without I/O: one route, several member servers, one namespace.

- :mod:`.names`: the namespace of a route (members, prefixes, filters, renames), how a member's
  tool, prompt or resource gets its federated name, how a federated name or URI is routed back to
  (member, original), the collision rule, and the checks of a configuration.
- :mod:`.parts`: what a member's answer to a fan-out is (a result, or missing and why), the cache
  hints of a merged answer, and the report of items left out.
- :mod:`.lists`: the merge of the members' list pages into one.
- :mod:`.cursor`: the sealed cursor that carries the members still to page.
- :mod:`.discover`: the merge of the members' ``server/discover`` results.
- :mod:`.rewrite`: requests rewritten for their member, URIs in answers rewritten to federated form.

Nothing here keeps state between requests, reads a clock (``now`` is passed in) or does I/O; the
fan-out, the deadlines and the members themselves live in the upstream layer.
"""
