"""Fixtures for the authentication tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.auth.support import FakeClock, JwksServer, SigningKey, new_ec, new_rsa


@pytest.fixture(scope="session")
def rsa_key() -> SigningKey:
    return new_rsa("rsa-1")


@pytest.fixture(scope="session")
def ec_key() -> SigningKey:
    return new_ec("ec-1")


@pytest.fixture(scope="session")
def jwks_server_session() -> Iterator[JwksServer]:
    server = JwksServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def jwks_server(jwks_server_session: JwksServer) -> JwksServer:
    jwks_server_session.state.reset()
    return jwks_server_session


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
