"""The stream client's errors in words, against a real broker: every response code the
protocol defines has a sentence, and the ones a user meets name their stream or user."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest

from mainstem.client.stream import MEANINGS, Endpoint, StreamClient, StreamClientError, describe
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.testing import ThreadedBroker


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> Iterator[str]:
    with ThreadedBroker(tmp_path_factory.mktemp("broker")) as running:
        yield running.urls["stream"]


def test_every_response_code_has_words() -> None:
    endpoint = Endpoint("h", 5552, "alice", "secret", "/")
    for code in ResponseCode:
        if code is ResponseCode.OK:
            continue
        words = describe(code, endpoint, "Subscribe", "orders")
        assert code in MEANINGS and "0x" not in words
        assert "secret" not in words
    assert describe(0x99, endpoint, "Open") == "Open failed with unknown response code 0x99"


def test_a_missing_stream_is_named(url: str) -> None:
    with StreamClient.connect(url) as client:
        with pytest.raises(StreamClientError, match=r"^stream 'copy' does not exist$") as caught:
            client.declare_publisher(0, "ref", "copy")
        assert caught.value.code == ResponseCode.STREAM_DOES_NOT_EXIST
        with pytest.raises(StreamClientError, match=r"^stream 'gone' does not exist$"):
            client.offsets("gone")


def test_a_wrong_password_names_the_user(url: str) -> None:
    endpoint = Endpoint.parse(url)
    wrong = f"rabbitmq-stream://guest:nope@{endpoint.host}:{endpoint.port}/%2F"
    with pytest.raises(StreamClientError, match=r"^authentication failed for user 'guest'$"):
        StreamClient.connect(wrong)


def test_an_unknown_virtual_host_names_user_and_host(url: str) -> None:
    endpoint = Endpoint.parse(url)
    elsewhere = f"rabbitmq-stream://guest:guest@{endpoint.host}:{endpoint.port}/{quote('nowhere')}"
    with pytest.raises(StreamClientError,
                       match=r"^user 'guest' has no access to virtual host 'nowhere'$"):
        StreamClient.connect(elsewhere)
