"""A route with several members, served statelessly: the I/O around mcp_edge.core.federation.

- :mod:`.route`: the route's upstream adapter (calls routed by name, lists and discover fanned
  out and merged, other methods refused);
- :mod:`.reader`: a request derived from the client's, asked of a member, its answer read;
- :mod:`.answers`: a routed call's answer relayed (``data.member`` on the adapter's errors, URIs
  federated);
- :mod:`.listen`: ``subscriptions/listen`` fanned in from every member;
- :mod:`.health`: members watched while nobody asks;
- :mod:`.report`: metrics and log lines.
"""
