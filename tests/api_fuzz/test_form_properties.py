"""Properties of the byte-exact parameter decoding and of message names.

* ``UrlencodedDecoder`` fed in arbitrary chunk splits gives what
  ``urllib.parse.parse_qsl(..., encoding="latin-1")`` gives, as bytes (the original
  replicator sends binary messages urlencoded, so one changed byte is a corrupt message).
* ``form_fields`` (a publish's one parse on the event loop) gives what the streaming
  decoder gives and refuses what it refuses (a field too long, the fields together).
* ``parse_multipart`` keeps ``msg`` byte-exact, as a field or a file, whatever the
  boundary and however the body arrives in pieces.
* ``read_frames`` (the framed batch body) keeps every message byte-exact with its own
  options, in any chunking, and refuses every body cut short, even at a frame's end.
* Names: format/parse round trip, UTC whatever the input's zone, lexical order is
  (time, counter) order, and ``store_dirs`` agrees with a plain reading of PROTOCOL.md
  ("The store fan-out"), implemented here independently.
"""

from __future__ import annotations

import string
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qsl, quote_from_bytes, unquote_to_bytes

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tests.support.tiers import examples
from zoscii_api.params import (
    MAX_KEY_BYTES,
    ParamCollector,
    RequestParams,
    UrlencodedDecoder,
    decode_urlencoded,
    form_fields,
    parse_multipart,
    read_params,
    unquote_plus_bytes,
)
from zosciimq.core import DataDir, MessageName, Upload, parse_name
from zosciimq.core.names import MAX_COUNTER, MAX_RETENTION_DAYS, format_stamp, store_dirs
from zosciimq.errors import InvalidInput
from zosciimq.protocol import FRAME_END, FRAME_KEYS, read_frames

FIELD_LIMIT = 1 << 20
PROPERTY_SETTINGS = settings(max_examples=examples(300), deadline=None)


@pytest.fixture(scope="module")
def layout() -> Iterator[DataDir]:
    with tempfile.TemporaryDirectory(prefix="zoscii-props-") as root:
        data_dir = DataDir(Path(root))
        data_dir.ensure()
        yield data_dir


def _collect(layout: DataDir) -> tuple[RequestParams, ParamCollector]:
    params = RequestParams()
    return params, ParamCollector(params, lambda: Upload(layout), FIELD_LIMIT)


def _decoded(params: RequestParams) -> dict[str, bytes]:
    """Every parameter as bytes, ``msg`` read back from its upload file."""
    values = dict(params.fields)
    if params.upload is not None:
        params.upload.sync()
        values["msg"] = params.upload.path.read_bytes()
    return values


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# --- urlencoded ---------------------------------------------------------------------------

_HEX = "0123456789abcdefABCDEF"
# Pieces of an encoded value: literal characters, escapes, "+", and the broken escapes a
# lenient decoder must leave alone ("%", "%4", "%zz"), all in any order.
_VALUE_PIECE = st.one_of(
    st.text(alphabet="abcXYZ019-_.~*!'()=/?:@,;", min_size=1, max_size=4),
    st.tuples(st.sampled_from(_HEX), st.sampled_from(_HEX)).map(lambda t: f"%{t[0]}{t[1]}"),
    st.just("+"),
    st.sampled_from(["%", "%4", "%zz", "%%", "%4%", "%%41", "%G1"]),
)
_VALUE = st.lists(_VALUE_PIECE, max_size=12).map("".join)
# Keys: anything that decodes to non-empty ASCII within the raw-length limit.
_KEY = st.one_of(
    st.sampled_from(["action", "q", "msg", "n", "r", "after", "names"]),
    st.lists(
        st.one_of(
            st.text(alphabet="abcXYZ019-_.", min_size=1, max_size=3),
            st.just("+"),
            st.integers(0x20, 0x7E).map(lambda b: f"%{b:02X}"),
        ),
        min_size=1,
        max_size=6,
    ).map("".join),
).filter(lambda key: len(key) <= MAX_KEY_BYTES)
_SEGMENT = st.one_of(
    st.tuples(_KEY, _VALUE).map(lambda kv: f"{kv[0]}={kv[1]}"),
    _KEY,  # a key with no "=": an empty value
    st.just(""),  # "&&"
    _VALUE.map(lambda value: f"={value}"),  # no key: ignored
)


def _expected_urlencoded(body: str) -> dict[str, bytes]:
    pairs = parse_qsl(body, keep_blank_values=True, encoding="latin-1")
    expected = {}
    for key, value in pairs:
        if key:  # an empty name has nowhere to go
            expected[key] = value.encode("latin-1")  # the last one wins, as in PHP
    return expected


@PROPERTY_SETTINGS
@given(
    segments=st.lists(_SEGMENT, max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_urlencoded_equals_parse_qsl_in_any_chunking(
    layout: DataDir, segments: list[str], cuts: list[int]
) -> None:
    body = "&".join(segments)
    params, collector = _collect(layout)
    decoder = UrlencodedDecoder(collector)
    try:
        for chunk in _split(body.encode("ascii"), cuts):
            decoder.feed(chunk)
        decoder.finish()
        assert _decoded(params) == _expected_urlencoded(body)
    finally:
        params.close()


@PROPERTY_SETTINGS
@given(segments=st.lists(_SEGMENT, max_size=8))
def test_whole_body_decoding_equals_parse_qsl(layout: DataDir, segments: list[str]) -> None:
    """The fast path for small bodies and query strings gives what the stream decoder does."""
    body = "&".join(segments)
    params, collector = _collect(layout)
    try:
        decode_urlencoded(body.encode("ascii"), collector)
        assert _decoded(params) == _expected_urlencoded(body)
    finally:
        params.close()


@PROPERTY_SETTINGS
@given(segments=st.lists(_SEGMENT, max_size=8), limit=st.sampled_from([2, 6, FIELD_LIMIT]))
@example(segments=["n=ab", "n=ab", "n=ab"], limit=2)  # a repeated field counts each time
@example(segments=["n=ab", "r=ab", "q=a", "msg=abcdef"], limit=2)  # msg is not counted
@example(segments=["n=abc"], limit=2)
def test_the_loops_one_parse_equals_the_stream_decoder(
    layout: DataDir, segments: list[str], limit: int
) -> None:
    """``form_fields`` (a publish's one parse on the event loop) gives every parameter,
    ``msg`` among them, as the streaming decoder does, and refuses what it refuses with
    the same words: a field over ``limit``, the fields over twice that together."""
    body = "&".join(segments).encode("ascii")
    assume("batch" not in _expected_urlencoded(body.decode()))  # a batch: never this path
    params = RequestParams()
    collector = ParamCollector(params, lambda: Upload(layout), limit)
    try:
        try:
            decode_urlencoded(body, collector)
            streamed: dict[str, bytes] | str = _decoded(params)
        except InvalidInput as exc:
            streamed = str(exc)
    finally:
        params.close()
    try:
        whole: dict[str, bytes] | str = form_fields(body, limit)
    except InvalidInput as exc:
        whole = str(exc)
    assert whole == streamed


@PROPERTY_SETTINGS
@given(msg=st.binary(max_size=4000), sizes=st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_a_small_form_arriving_in_pieces_is_read_whole(
    layout: DataDir, msg: bytes, sizes: list[int]
) -> None:
    """A body under WHOLE_FORM_BYTES decoded in one go must still be read to its end:
    a deadline-guarded socket returns less than asked (it once stored 14,971 of 70,000)."""
    body = b"action=publish&q=orders&msg=" + quote_from_bytes(msg, safe="").encode()
    params = read_params(
        query={},
        content_type="application/x-www-form-urlencoded",
        content_length=len(body),
        stream=TrickleStream(body, sizes),
        has_body=True,
        new_upload=lambda: Upload(layout),
        max_field_bytes=FIELD_LIMIT,
    )
    try:
        assert _decoded(params)["msg"] == msg
    finally:
        params.close()


_ESCAPE_HEAVY = st.lists(
    st.one_of(
        st.sampled_from([b"%", b"=", b"+", b"\r", b"\n", b"%0", b"%%", b"=3D", b"%3d", b"%zz"]),
        st.tuples(st.sampled_from(_HEX), st.sampled_from(_HEX)).map(
            lambda t: f"%{t[0]}{t[1]}".encode()
        ),
        st.binary(min_size=1, max_size=3),
    ),
    max_size=40,
).map(b"".join)


@settings(max_examples=examples(2000), deadline=None)
@given(raw=_ESCAPE_HEAVY)
@example(raw=b"%=")
@example(raw=b"%")
@example(raw=b"%\n41")
@example(raw=b"=\r\n")
@example(raw=b"%%41")
def test_fast_percent_decoding_equals_the_reference(raw: bytes) -> None:
    """``unquote_plus_bytes`` (quoted-printable in C) is ``unquote_to_bytes`` byte for byte,
    malformed escapes, literal "=" and line breaks included."""
    assert unquote_plus_bytes(raw) == unquote_to_bytes(raw.replace(b"+", b" "))


@PROPERTY_SETTINGS
@given(msg=st.binary(max_size=2048), cuts=st.lists(st.integers(0, 8000), max_size=20))
def test_urlencoded_binary_message_is_byte_exact(
    layout: DataDir, msg: bytes, cuts: list[int]
) -> None:
    """As PHP's http_build_query sends it: every non-safe byte escaped, space as "+"."""
    safe = string.ascii_letters + string.digits + "-_."
    encoded = "".join(
        chr(b) if chr(b) in safe else ("+" if b == 0x20 else f"%{b:02X}") for b in msg
    )
    body = f"action=publish&q=orders&msg={encoded}&r=1".encode("ascii")
    params, collector = _collect(layout)
    decoder = UrlencodedDecoder(collector)
    try:
        for chunk in _split(body, cuts):
            decoder.feed(chunk)
        decoder.finish()
        assert _decoded(params) == {"action": b"publish", "q": b"orders", "msg": msg, "r": b"1"}
    finally:
        params.close()


# --- multipart ----------------------------------------------------------------------------


class TrickleStream:
    """A body that arrives in pieces of the given sizes, as a slow client sends it."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.position = data, sizes or [1 << 16], 0

    def read(self, limit: int) -> bytes:
        size = min(self.sizes[self.position % len(self.sizes)], limit)
        piece = self.data[:size]
        self.data = self.data[len(piece) :]
        self.position += 1
        return piece


_BOUNDARY = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'()+_,-./:=?",
    min_size=1,
    max_size=70,
).filter(lambda b: not b.endswith(" "))
_SMALL_FIELDS = st.dictionaries(
    st.sampled_from(["action", "q", "n", "r", "u", "after", "name", "names"]),
    st.binary(max_size=40).filter(lambda v: b"\r" not in v and b"\n" not in v),
    max_size=4,
)


def _multipart(
    boundary: str, fields: dict[str, bytes], msg: bytes, as_file: bool, msg_at: int = -1
) -> bytes:
    """A form as browsers and curl send it; ``msg`` goes at position ``msg_at``."""
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        + value
        + b"\r\n"
        for name, value in fields.items()
    ]
    disposition = 'form-data; name="msg"' + ('; filename="m.bin"' if as_file else "")
    content_type = "Content-Type: application/octet-stream\r\n" if as_file else ""
    message = (
        f"--{boundary}\r\nContent-Disposition: {disposition}\r\n{content_type}\r\n".encode()
        + msg
        + b"\r\n"
    )
    parts.insert(len(parts) if msg_at < 0 else min(msg_at, len(parts)), message)
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


_MESSAGES = st.one_of(
    st.binary(max_size=4096),
    st.binary(min_size=70_000, max_size=70_100),  # longer than one read of the parser
    st.sampled_from([b"", b"\r", b"\r\n", b"--", b"\r\n--", b"\r\n\r\n", b"--\r\n"]),
)
_READ_SIZES = st.lists(st.integers(1, 70_000), max_size=8)


def _read_ends(sizes: list[int], total: int) -> set[int]:
    """Where each read of a TrickleStream ends, as offsets into the body."""
    ends, position, index = set(), 0, 0
    while position < total:
        position = min(total, position + sizes[index % len(sizes)])
        ends.add(position)
        index += 1
    return ends


def _check_multipart(
    layout: DataDir,
    boundary: str,
    fields: dict,
    msg: bytes,
    as_file: bool,
    sizes: list[int],
    msg_at: int = -1,
) -> None:
    body = _multipart(boundary, fields, msg, as_file, msg_at)
    params, collector = _collect(layout)
    try:
        parse_multipart(TrickleStream(body, sizes), boundary, collector)
        assert _decoded(params) == {**fields, "msg": msg}
    finally:
        params.close()
    assert list(layout.temp.iterdir()) == []


@PROPERTY_SETTINGS
@given(
    boundary=_BOUNDARY,
    fields=_SMALL_FIELDS,
    msg=_MESSAGES,
    as_file=st.booleans(),
    sizes=_READ_SIZES,
    msg_at=st.integers(-1, 4),
)
def test_multipart_message_is_byte_exact(
    layout: DataDir,
    boundary: str,
    fields: dict[str, bytes],
    msg: bytes,
    as_file: bool,
    sizes: list[int],
    msg_at: int,
) -> None:
    """Any chunking that does not split the closing delimiter (see the xfail below)."""
    assume(f"\r\n--{boundary}".encode() not in b"\r\n" + msg + b"\r\n")  # a client's duty
    total = len(_multipart(boundary, fields, msg, as_file, msg_at))
    closing = len(f"\r\n--{boundary}--\r\n")
    assume(not any(total - closing < end < total for end in _read_ends(sizes or [1 << 16], total)))
    _check_multipart(layout, boundary, fields, msg, as_file, sizes, msg_at)


@PROPERTY_SETTINGS
@example(boundary="b", fields={}, msg=b"", as_file=False, sizes=[1])
@given(
    boundary=_BOUNDARY,
    fields=_SMALL_FIELDS,
    msg=_MESSAGES,
    as_file=st.booleans(),
    sizes=_READ_SIZES,
)
def test_multipart_message_is_byte_exact_in_any_chunking(
    layout: DataDir,
    boundary: str,
    fields: dict[str, bytes],
    msg: bytes,
    as_file: bool,
    sizes: list[int],
) -> None:
    assume(f"\r\n--{boundary}".encode() not in b"\r\n" + msg + b"\r\n")  # a client's duty
    _check_multipart(layout, boundary, fields, msg, as_file, sizes)


# --- framed batches -----------------------------------------------------------------------

_NONCES = st.text(alphabet=string.ascii_letters + string.digits + "-_.:", min_size=1, max_size=40)
_FRAMES = st.lists(
    st.tuples(
        st.binary(max_size=600) | st.sampled_from([b"", b"end\n", b"12 n=x\nend\n", b"\n"]),
        st.fixed_dictionaries(
            {}, optional={"n": _NONCES, "r": st.integers(0, 9999).map(str), "ttl": _NONCES}
        ),
    ),
    max_size=6,
)


def _framed(frames: list[tuple[bytes, dict[str, str]]]) -> bytes:
    out = b""
    for data, options in frames:
        head = b"%d" % len(data)
        if options:
            pairs = (f"{key}={quote_from_bytes(value.encode())}" for key, value in options.items())
            head += b" " + "&".join(pairs).encode()
        out += head + b"\n" + data
    return out + FRAME_END


def _batch_collector(layout: DataDir) -> tuple[RequestParams, ParamCollector]:
    params = RequestParams(batch=[])
    return params, ParamCollector(
        params, lambda: Upload(layout), FIELD_LIMIT, max_parts=1000, max_batch_bytes=1 << 30
    )


@PROPERTY_SETTINGS
@given(frames=_FRAMES, sizes=_READ_SIZES)
def test_framed_batch_is_byte_exact_in_any_chunking(
    layout: DataDir, frames: list[tuple[bytes, dict[str, str]]], sizes: list[int]
) -> None:
    params, collector = _batch_collector(layout)
    try:
        read_frames(TrickleStream(_framed(frames), sizes), collector.open_part)
        assert params.batch is not None
        got = [(Path(p.upload.temp_path).read_bytes(), p.options) for p in params.batch]
        names = {key: header.lower() for header, key in FRAME_KEYS.items()}
        assert got == [(d, {names[k]: v for k, v in o.items()}) for d, o in frames]
    finally:
        params.close()
    assert list(layout.temp.iterdir()) == []


@PROPERTY_SETTINGS
@given(frames=_FRAMES, sizes=_READ_SIZES, data=st.data())
def test_a_framed_batch_cut_short_anywhere_is_refused(
    layout: DataDir, frames: list[tuple[bytes, dict[str, str]]], sizes: list[int], data
) -> None:
    """Every strict prefix of a body is an error, a cut right after a whole frame too:
    a batch that lost its tail must never be taken for a smaller one."""
    body = _framed(frames)
    cut = data.draw(st.integers(0, len(body) - 1))
    params, collector = _batch_collector(layout)
    try:
        with pytest.raises(InvalidInput, match="Malformed batch body"):
            read_frames(TrickleStream(body[:cut], sizes), collector.open_part)
    finally:
        params.close()
    assert list(layout.temp.iterdir()) == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"1\nxend\ntrailing", "bytes after its 'end' line"),
        (b"x\nend\n", "is not '<length>"),
        (b"-1\nend\n", "is not '<length>"),
        (b"1 q=other\nxend\n", "unknown frame option 'q'"),
        (b"1 " + b"n=" + b"a" * 2000 + b"\nxend\n", "longer than 1024 bytes"),
        (b"99999999999999999999\nend\n", "is not '<length>"),
    ],
)
def test_malformed_framed_batches_are_refused(layout: DataDir, body: bytes, why: str) -> None:
    params, collector = _batch_collector(layout)
    try:
        with pytest.raises(InvalidInput, match=why):
            read_frames(TrickleStream(body, [7]), collector.open_part)
    finally:
        params.close()
    assert list(layout.temp.iterdir()) == []


# --- names --------------------------------------------------------------------------------

_MOMENTS = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.just(UTC),
)
_ZONES = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
_NAMES = st.builds(
    MessageName,
    stamp=_MOMENTS.map(format_stamp),
    counter=st.integers(0, MAX_COUNTER),
    retention_days=st.integers(0, MAX_RETENTION_DAYS),
    guid=st.uuids(version=4).map(str),
    unidentified=st.booleans(),
)


@PROPERTY_SETTINGS
@given(_NAMES)
def test_name_round_trip(name: MessageName) -> None:
    text = str(name)
    assert len(text) == (66 if name.unidentified else 64)
    assert parse_name(text) == name
    assert str(parse_name(text)) == text


@PROPERTY_SETTINGS
@given(moment=_MOMENTS, zone=_ZONES)
def test_names_are_utc_whatever_the_zone(moment: datetime, zone: timezone) -> None:
    local = moment.astimezone(zone)
    assume(1970 <= local.year <= 9999)
    name = MessageName(format_stamp(local), 0, 0, str(uuid.uuid4()))
    assert name.published_at == moment.replace(microsecond=0)
    assert name.published_timestamp == int(moment.timestamp())


@PROPERTY_SETTINGS
@given(a=_NAMES, b=_NAMES)
def test_lexical_order_is_time_then_counter_order(a: MessageName, b: MessageName) -> None:
    assume((a.published_at, a.counter) != (b.published_at, b.counter))
    assert (str(a) < str(b)) == ((a.published_at, a.counter) < (b.published_at, b.counter))


def reference_store_dirs(name: str) -> tuple[str, str, str]:
    """PROTOCOL.md, read plainly: reorder YYYYMMDDHHNNSSCCCC to SS NN HH DD MM YYYY CCCC,
    read it as a decimal number, write it in base 36 (0-9a-z), take three characters."""
    year, month, day = name[0:4], name[4:6], name[6:8]
    hour, minute, second, counter = name[8:10], name[10:12], name[12:14], name[14:18]
    number = int(second + minute + hour + day + month + year + counter)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    width = 1
    while 36**width <= number:
        width += 1
    text = "".join(digits[number // 36**power % 36] for power in range(width - 1, -1, -1))
    assert int(text, 36) == number
    return text[0], text[1], text[2]


@PROPERTY_SETTINGS
@given(_NAMES)
def test_store_dirs_follow_the_protocol_rule(name: MessageName) -> None:
    assert store_dirs(str(name)) == reference_store_dirs(str(name)) == name.store_dirs


def test_reference_store_dirs_agrees_with_the_original() -> None:
    """The reference itself is checked against what the original PHP computes."""
    table = Path(__file__).resolve().parents[1] / "fixtures" / "store-paths.tsv"
    rows = [line.split("\t") for line in table.read_text().splitlines()[1:] if line]
    assert rows
    for name, _base36, dirs in rows:
        assert "/".join(reference_store_dirs(name)) == dirs, name
