"""mainstem's clients load no server code: a Spark executor imports mainstem.client.stream
for every task, and must not pay for (or depend on) the broker core, the server or a
protocol's connection module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Module prefixes a client must never load.
SERVER_CODE = (
    "mainstem.server",
    "mainstem.broker",
    "mainstem.config",
    "mainstem.admin",
    "mainstem.protocols.base",
)


def loaded_after(statement: str) -> set[str]:
    """The mainstem modules a fresh interpreter holds after running `statement`."""
    script = (
        f"import sys, json\n{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'mainstem')))"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return set(json.loads(out))


def is_server_code(module: str) -> bool:
    return module.startswith(SERVER_CODE) or module.endswith(".connection")


@pytest.mark.parametrize(
    ("client", "protocol"),
    [
        ("stream", "rabbit_stream"),
        ("iggy", "iggy"),
        ("events", "bson_events"),
        ("segment", "segment"),
    ],
)
def test_a_client_loads_its_codec_and_no_server_code(client: str, protocol: str) -> None:
    loaded = loaded_after(f"import mainstem.client.{client}")
    assert not {m for m in loaded if is_server_code(m)}
    assert f"mainstem.protocols.{protocol}.codec" in loaded
    others = {m for m in loaded if m.startswith("mainstem.protocols.")
              and not m.startswith(f"mainstem.protocols.{protocol}")}
    assert not others  # no other protocol's package either


def test_the_spark_data_source_loads_no_server_code() -> None:
    loaded = loaded_after("import pyspark_mainstem")  # what every executor imports
    assert "mainstem.client.stream" in loaded
    assert not {m for m in loaded if is_server_code(m)}


def test_the_stream_client_loads_only_its_codec_and_the_chunk_layout() -> None:
    loaded = loaded_after("import mainstem.client.stream")
    allowed = {"mainstem", "mainstem.compiled", "mainstem.client", "mainstem.client.stream",
               "mainstem.client.tls_diagnosis",  # its failures in words: the stdlib only
               "mainstem.formats.chunk", "mainstem.formats",
               "mainstem.formats.osiris", "mainstem.protocols"}
    assert {m for m in loaded if not m.startswith("mainstem.protocols.rabbit_stream")} <= allowed


def test_the_package_still_exports_the_broker_lazily() -> None:
    assert "mainstem.server" not in loaded_after("import mainstem")
    loaded = loaded_after("from mainstem import Broker, __version__\nassert Broker.__name__")
    assert "mainstem.server" in loaded
    with pytest.raises(subprocess.CalledProcessError):
        loaded_after("from mainstem import NoSuchThing")
