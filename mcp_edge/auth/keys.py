"""Verification keys for JWS signatures, and which algorithm each key may verify.

A token's ``alg`` header is attacker-chosen. The gateway therefore never lets the header pick how
a key is interpreted: an algorithm is used only with a key of the matching type (RSA for RS*/PS*,
an EC key on the matching curve for ES*, an OKP key for EdDSA, a configured shared secret for HS*),
and, when the key names its own ``alg``, only that one. That closes algorithm confusion (an HS256
token "signed" with an RSA public key) independently of the allow-list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: Asymmetric JWS algorithms PyJWT verifies.
ASYMMETRIC_ALGORITHMS = frozenset(
    {
        "RS256",
        "RS384",
        "RS512",
        "PS256",
        "PS384",
        "PS512",
        "ES256",
        "ES256K",
        "ES384",
        "ES512",
        "EdDSA",
    }
)
#: Symmetric (shared secret) algorithms; only usable with an explicitly configured secret.
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
SUPPORTED_ALGORITHMS = ASYMMETRIC_ALGORITHMS | HMAC_ALGORITHMS

#: Smallest RSA modulus accepted for signature keys.
MIN_RSA_BITS = 2048
#: Smallest shared secret accepted for HS* (RFC 7518 §3.2: at least the hash size; 32 for HS256).
MIN_SECRET_BYTES = 32

_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521", "ES256K": "secp256k1"}
_CRYPTOGRAPHY_CURVES = {
    "secp256r1": "P-256",
    "secp384r1": "P-384",
    "secp521r1": "P-521",
    "secp256k1": "secp256k1",
}


def required_key_type(alg: str) -> tuple[str, str | None]:
    """The JWK ``kty`` (and ``crv`` for EC) a key must have to verify ``alg``."""
    if alg.startswith(("RS", "PS")):
        return "RSA", None
    if alg in _EC_CURVES:
        return "EC", _EC_CURVES[alg]
    if alg == "EdDSA":
        return "OKP", None
    if alg in HMAC_ALGORITHMS:
        return "oct", None
    raise ValueError(f"unsupported algorithm {alg!r}")


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """One key the gateway may verify signatures with."""

    kid: str | None
    #: JWK key type: ``RSA``, ``EC``, ``OKP`` or ``oct``.
    kty: str
    #: Curve (JWK spelling) for EC and OKP keys.
    crv: str | None
    #: The one algorithm this key is pinned to (the JWK ``alg`` member), if any.
    alg: str | None
    #: What ``jwt.decode`` gets: a ``cryptography`` public key, or bytes for a shared secret.
    key: Any

    def can_verify(self, alg: str) -> bool:
        if self.alg is not None and self.alg != alg:
            return False
        try:
            kty, crv = required_key_type(alg)
        except ValueError:
            return False
        if kty != self.kty:
            return False
        if crv is not None and crv != self.crv:
            return False
        return alg != "EdDSA" or self.crv in ("Ed25519", "Ed448")

    def __repr__(self) -> str:  # never print key material (matters for shared secrets)
        return f"VerificationKey(kid={self.kid!r}, kty={self.kty!r}, crv={self.crv!r}, alg={self.alg!r})"


class KeyNotFound(Exception):
    """No key matches the token's ``kid`` (after any refresh that was allowed)."""


class KeyMismatch(Exception):
    """A key was found but it may not verify the token's algorithm (or the choice is ambiguous)."""


class KeysUnavailable(Exception):
    """The key set cannot be obtained right now (JWKS endpoint down and nothing suitable cached)."""


class KeySource(Protocol):
    """Where the JWT authenticator gets verification keys from."""

    async def get_key(self, kid: str | None, alg: str) -> VerificationKey:
        """The key for this token header, or raise KeyNotFound / KeyMismatch / KeysUnavailable."""
        ...

    async def aclose(self) -> None: ...


def select_key(keys: tuple[VerificationKey, ...], kid: str | None, alg: str) -> VerificationKey:
    """Pick the key for a token header from a key set.

    With a ``kid`` the key with that id must be able to verify ``alg``. Without a ``kid`` exactly
    one key of the set must be able to verify ``alg`` (no trial verification against many keys).
    Raises KeyNotFound or KeyMismatch.
    """
    if kid is not None:
        named = [k for k in keys if k.kid == kid]
        if not named:
            raise KeyNotFound(kid)
        for key in named:
            if key.can_verify(alg):
                return key
        raise KeyMismatch(f"key {kid!r} cannot verify {alg}")
    usable = [k for k in keys if k.can_verify(alg)]
    if len(usable) == 1:
        return usable[0]
    if not usable:
        raise KeyNotFound(None)
    raise KeyMismatch("the token names no key id and several keys could verify it")


# ------------------------------------------------------------------ building keys


def _from_public_key(
    public_key: Any, kid: str | None, alg: str | None, where: str
) -> VerificationKey:
    # (PyJWT and cryptography's key types are loaded by a configuration with keys: jwt mode.)
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(public_key, rsa.RSAPublicKey):
        if public_key.key_size < MIN_RSA_BITS:
            raise ValueError(
                f"{where}: RSA key is {public_key.key_size} bits, at least {MIN_RSA_BITS} required"
            )
        kty, crv = "RSA", None
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        crv = _CRYPTOGRAPHY_CURVES.get(public_key.curve.name)
        if crv is None:
            raise ValueError(f"{where}: unsupported EC curve {public_key.curve.name}")
        kty = "EC"
    elif isinstance(public_key, ed25519.Ed25519PublicKey):
        kty, crv = "OKP", "Ed25519"
    elif isinstance(public_key, ed448.Ed448PublicKey):
        kty, crv = "OKP", "Ed448"
    else:
        raise ValueError(f"{where}: unsupported public key type {type(public_key).__name__}")  # noqa: TRY004
    key = VerificationKey(kid=kid, kty=kty, crv=crv, alg=alg, key=public_key)
    if alg is not None and not key.can_verify(alg):
        raise ValueError(f"{where}: a {kty} key{f' on {crv}' if crv else ''} cannot verify {alg}")
    return key


def key_from_pem(
    pem: bytes | str, *, kid: str | None = None, alg: str | None = None, where: str = "key"
) -> VerificationKey:
    """A public key (``BEGIN PUBLIC KEY``) or certificate (``BEGIN CERTIFICATE``) in PEM form.

    Private keys are refused: the gateway only ever needs the public half.
    """
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    if b"PRIVATE KEY" in data:
        raise ValueError(
            f"{where}: is a private key; configure the public key (or certificate) instead"
        )
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        if b"BEGIN CERTIFICATE" in data:
            public_key: Any = x509.load_pem_x509_certificate(data).public_key()
        else:
            public_key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise ValueError(f"{where}: not a PEM public key or certificate ({exc})") from None
    return _from_public_key(public_key, kid, alg, where)


def key_from_jwk(jwk_data: Mapping[str, Any]) -> VerificationKey:
    """One member of a JWK Set, parsed with PyJWT. Raises ValueError for keys the gateway
    will not use: symmetric keys (never trusted from a URL), encryption keys, private keys,
    unsupported types and weak RSA keys."""
    if not isinstance(jwk_data, Mapping):
        raise ValueError("not a JSON object")  # noqa: TRY004 - callers skip bad JWKS members on ValueError
    kty = jwk_data.get("kty")
    kid = jwk_data.get("kid")
    alg = jwk_data.get("alg")
    if kid is not None and not isinstance(kid, str):
        raise ValueError("kid is not a string")
    if alg is not None and alg not in ASYMMETRIC_ALGORITHMS:
        raise ValueError(f"alg {alg!r} is not an accepted signature algorithm")
    if kty == "oct":
        raise ValueError("symmetric keys are not accepted from a JWKS")
    if jwk_data.get("use") not in (None, "sig"):
        raise ValueError(f"use is {jwk_data.get('use')!r}, not 'sig'")
    key_ops = jwk_data.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise ValueError("key_ops does not allow 'verify'")
    if "d" in jwk_data:
        raise ValueError("contains private key material")
    hint = alg or {"OKP": "EdDSA"}.get(str(kty))
    import jwt

    try:
        parsed = jwt.PyJWK(dict(jwk_data), algorithm=hint)
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"unusable key ({type(exc).__name__})") from None
    # _from_public_key accepts public key types only, so a private key object is refused there too.
    return _from_public_key(parsed.key, kid, alg, "jwk")


def key_from_secret(
    secret: bytes, *, kid: str | None = None, alg: str | None = None
) -> VerificationKey:
    """A shared secret for HS* tokens (only when configured explicitly)."""
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the shared secret must be at least {MIN_SECRET_BYTES} bytes")
    return VerificationKey(kid=kid, kty="oct", crv=None, alg=alg, key=secret)


class StaticKeySource:
    """Keys fixed at start (PEM public keys, certificates, or a shared secret)."""

    def __init__(self, keys: list[VerificationKey] | tuple[VerificationKey, ...]) -> None:
        if not keys:
            raise ValueError("no verification key configured")
        self._keys = tuple(keys)

    @property
    def keys(self) -> tuple[VerificationKey, ...]:
        return self._keys

    async def get_key(self, kid: str | None, alg: str) -> VerificationKey:
        return select_key(self._keys, kid, alg)

    async def aclose(self) -> None:
        return None
