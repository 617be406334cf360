"""ASGI plumbing: the request context, the one body reader and response writer, and one middleware per concern."""
