"""The gateway's own sign-in of a browser (OpenID Connect, authorization code with PKCE and a
nonce) at its identity provider, the issuer of the callers' tokens: what proves that the person
who opened a consent link is the caller whose request asked for it.

The ID token is checked with the keys the gateway checks the callers' tokens with
(``auth.jwt``), and names the person as those tokens do (issuer and subject), so the two can be
compared exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp_edge.auth.base import Principal
from mcp_edge.auth.keys import KeySource
from mcp_edge.identity import oauth_client
from mcp_edge.identity.asclient import ASRefused, ASUnavailable, AuthorizationServer
from mcp_edge.identity.consent_config import SignInConfig
from mcp_edge.identity.consent_seals import ConsentRefused, Transaction


class SignIn:
    def __init__(
        self,
        section: SignInConfig,
        *,
        server: AuthorizationServer,
        keys: KeySource,
        algorithms: Sequence[str],
        redirect_uri: str,
    ) -> None:
        assert section.issuer is not None
        self.section = section
        self.issuer = section.issuer
        self.server = server
        self.keys = keys
        self.algorithms = tuple(section.algorithms or algorithms)
        self.redirect_uri = redirect_uri

    async def authorization_url(self, tx: Transaction) -> str:
        meta = await self.server.metadata()
        endpoint = oauth_client.authorization_endpoint(meta, allow_http=self.section.allow_http)
        params = oauth_client.code_request(
            tx,
            client_id=self.server.client_id,
            redirect_uri=self.redirect_uri,
            scope=self.section.scope,
        )
        return oauth_client.authorization_url(endpoint, params)

    async def signed_in(self, code: str, tx: Transaction, iss: str | None) -> Principal:
        """Who signed in: the code redeemed, the ID token checked. :class:`ConsentRefused`."""
        try:
            meta = await self.server.metadata()
            oauth_client.check_issuer_parameter(meta, self.issuer, iss)
            doc = await oauth_client.redeem(self.server, code, tx, redirect_uri=self.redirect_uri)
        except ASRefused as refused:
            raise ConsentRefused(
                "failed", f"the sign-in's code was refused ({refused.error})"
            ) from None
        except ASUnavailable as down:
            raise ConsentRefused("unavailable", down.detail) from None
        return await oauth_client.verify_id_token(
            doc.get("id_token"),
            keys=self.keys,
            issuer=self.issuer,
            client_id=self.server.client_id,
            nonce=tx.nonce,
            algorithms=self.algorithms,
        )

    async def aclose(self) -> None:
        await self.server.aclose()
