"""A 2025-era upstream served to 2026-07-28 clients: the legacy bridge (see README.md here)."""
