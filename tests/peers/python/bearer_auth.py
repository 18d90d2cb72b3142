"""OAuth resource-server mode for upstream.py: the notes store doing its own OAuth.

With `--auth-issuer URL --auth-audience URL` the upstream requires a bearer JWT on every
MCP request, as the Python SDK's resource-server support does it: 401 with
`WWW-Authenticate: Bearer ... resource_metadata=...` naming its own protected-resource
metadata (served at /.well-known/oauth-protected-resource/mcp, resource = its own URL), and
tokens verified here against the issuer's JWKS (`<issuer>/jwks`, ES256), with `iss`, `aud`,
`exp` and the `mcp` scope checked.

The audience is given apart from the upstream's own URL on purpose: behind a gateway, clients
ask the authorization server for tokens for the gateway's URL, the resource they connected to.
Test use only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

SCOPE = "mcp"


class JwksTokenVerifier:
    """The SDK's TokenVerifier protocol, over PyJWT and the issuer's published keys."""

    def __init__(self, issuer: str, audience: str) -> None:
        self._issuer = issuer
        self._audience = audience
        self._keys = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=True)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await asyncio.to_thread(self._keys.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=["ES256"],
                audience=self._audience,
                issuer=self._issuer,
            )
        except (jwt.PyJWTError, OSError):
            return None
        scopes = str(claims.get("scope", "")).split()
        if SCOPE not in scopes:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", claims.get("sub", ""))),
            scopes=scopes,
            expires_at=claims.get("exp"),
            resource=self._audience,
            subject=claims.get("sub"),
            claims=claims,
        )


def require_tokens(server: Any, issuer: str, audience: str, own_url: str) -> None:
    """Makes `server` (an MCPServer, before its app is built) an OAuth resource server."""
    server.settings.auth = AuthSettings(
        issuer_url=issuer,
        resource_server_url=own_url,
        required_scopes=[SCOPE],
        # The verifier checks the audience itself (it is not the server's own URL).
        validate_token_resource=False,
    )
    # MCPServer takes its verifier only in its constructor, and upstream.py builds the server at
    # import time so that its tools can be declared with decorators.
    server._token_verifier = JwksTokenVerifier(issuer, audience)  # noqa: SLF001
