"""Replica to replica: sealed messages bound to the body they carry (forwarded retries of parked
calls, relayed 2025-era requests), the gate that admits them, the endpoints that serve them, and
which listener serves which endpoints."""
