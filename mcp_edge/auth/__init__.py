"""Who is calling: authenticators that turn an HTTP request into a :class:`Principal`."""

from mcp_edge.auth.base import AnonymousAuthenticator, Authenticator, AuthError, Principal

__all__ = ["AnonymousAuthenticator", "AuthError", "Authenticator", "Principal"]
