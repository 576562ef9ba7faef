"""The wire protocol module: what it writes is what PROTOCOL.md says, and the framed
batch encoder (the client's) and decoder (the api's) agree on every message."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from zosciimq import protocol
from zosciimq.errors import InvalidInput

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "PROTOCOL.md").read_text()
OPENAPI = (REPO / "services" / "api" / "zoscii_api" / "openapi.yaml").read_text()


class _Part(io.BytesIO):
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__()
        self.options = options


def _decode(body: bytes, block: int = 3) -> list[tuple[bytes, dict[str, str]]]:
    parts: list[_Part] = []

    def open_part(options: dict[str, str]) -> _Part:
        parts.append(_Part(options))
        return parts[-1]

    class Trickle(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            return super().read(block)

    protocol.read_frames(Trickle(body), open_part)
    return [(part.getvalue(), part.options) for part in parts]


def test_the_documented_example_decodes() -> None:
    example = re.search(r"`(5 n=order-1&r=7\\nhello.*?end\\n)`", DOC)
    assert example is not None
    body = example.group(1).replace("\\n", "\n").encode()
    assert _decode(body) == [
        (b"hello", {"x-zoscii-nonce": "order-1", "x-zoscii-retention": "7"}),
        (b"abc", {}),
    ]


def test_the_envelope_is_the_documented_one() -> None:
    published = re.search(r'^\{"system".*\}$', DOC, re.M)
    assert published is not None
    got = protocol.envelope_bytes("", "Message published.", [])
    assert got == published.group().encode() + b"\n"
    assert protocol.is_envelope(json.loads(got))
    assert not protocol.is_envelope({"system": "other", "error": ""})
    assert not protocol.is_envelope([protocol.SYSTEM])


def test_every_header_and_the_media_type_are_documented() -> None:
    for name in (*protocol.REPLY_HEADERS, protocol.NONCE, protocol.RETENTION):
        assert f"`{name}`" in OPENAPI, name
    assert f"`Content-Type: {protocol.FRAMED_BATCH}`" in DOC
    assert f"\n        {protocol.FRAMED_BATCH}:\n" in OPENAPI


@pytest.mark.parametrize("block", [1, 2, 7, 1 << 20])
def test_what_the_encoder_frames_the_decoder_reads_back(block: int) -> None:
    messages = [
        (b"", {}),
        (b"end\n", {protocol.NONCE: "a&b=c d%e+f"}),
        (b"\n5 n=x\n" * 50, {protocol.RETENTION: "7", protocol.TTL: "3600"}),
        (bytes(range(256)), {protocol.NONCE: "n-1", protocol.RETENTION: "0"}),
    ]
    body = b"".join(protocol.frame_head(len(data), o) + data for data, o in messages)
    body += protocol.FRAME_END
    expected = [(data, {k.lower(): v for k, v in o.items()}) for data, o in messages]
    assert _decode(body, block) == expected


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"1 n=%FF\nxend\n", "must be ASCII"),
        (b"1 n=\xc3\xa9\nxend\n", "must be ASCII"),
        (b"1 colour=red\nxend\n", "unknown frame option 'colour'"),
        (b"1\nx", "ends before its 'end' line"),
        (b"3\nx", "ends inside a message"),
    ],
)
def test_a_bad_frame_is_refused(body: bytes, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        _decode(body)


def test_an_option_without_a_name_is_ignored_as_in_a_query_string() -> None:
    assert _decode(b"1 =x&n=a\nbend\n") == [(b"b", {"x-zoscii-nonce": "a"})]
