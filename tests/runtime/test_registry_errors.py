"""A registry that cannot be reached is told apart from an image it does not have,
in the engine's own words. The messages are the ones Docker 20.10 answers (the
offline one from this machine's engine, asked for an image on Docker Hub); a test
cannot make the real engine reach out, since tests send traffic only to loopback."""

import pytest

from gpudock.runtime.docker.translate import registry_unreachable

OFFLINE = [
    'Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on '
    "10.255.255.53:53: no such host",
    'Get "https://registry.example:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused',
    'Get "https://registry-1.docker.io/v2/": net/http: request canceled while waiting for '
    "connection (Client.Timeout exceeded while awaiting headers)",
    'Get "https://ghcr.io/v2/": net/http: TLS handshake timeout',
    "dial tcp: lookup nvcr.io: Temporary failure in name resolution",
]
MISSING = [
    "manifest for pytorch/pytorch:no-such-tag not found: manifest unknown: manifest unknown",
    "pull access denied for nosuch/image, repository does not exist or may require "
    "'docker login': denied: requested access to the resource is denied",
    "invalid reference format",
]


@pytest.mark.parametrize("message", OFFLINE)
def test_an_engine_that_cannot_reach_its_registry_is_recognised(message: str) -> None:
    assert registry_unreachable(message)


@pytest.mark.parametrize("message", MISSING)
def test_a_registry_that_answers_no_is_not_called_unreachable(message: str) -> None:
    assert not registry_unreachable(message)
