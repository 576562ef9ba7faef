"""The data store: fan-out on disk, retrieve, scan, identify, idempotent put."""

import pytest

from zosciimq.core import Upload, parse_name
from zosciimq.errors import InvalidInput, MessageNotFound


def put(store, data_dir, body: bytes, **options):
    with Upload(data_dir) as upload:
        upload.write(body)
        return store.store(upload, retention_days=options.pop("retention", 3), **options)


def test_store_writes_into_the_fan_out_directory(store, data_dir) -> None:
    name = put(store, data_dir, b"\x00doc").name
    parsed = parse_name(name)
    assert parsed.counter == 0 and parsed.retention_days == 3 and not parsed.unidentified
    assert (data_dir.store.joinpath(*parsed.store_dirs) / name).read_bytes() == b"\x00doc"
    got_name, file, size = store.retrieve(name)
    with file:
        assert (got_name, file.read(), size) == (name, b"\x00doc", 4)


def test_retrieve_errors(store) -> None:
    with pytest.raises(InvalidInput, match="Invalid name 'x'"):
        store.retrieve("x")
    with pytest.raises(MessageNotFound):
        store.retrieve("202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin")


def test_scan_and_identify(store, data_dir) -> None:
    hidden = put(store, data_dir, b"a", unidentified=True).name
    known = put(store, data_dir, b"b").name
    assert hidden.endswith("-u.bin")
    assert store.scan() == [hidden]
    renamed = store.identify([parse_name(hidden), parse_name(known)])
    assert renamed == [hidden.replace("-u.bin", ".bin")]
    assert store.scan() == []
    assert store.identify([parse_name(hidden)]) == []  # already done: nothing to rename
    _, file, _ = store.retrieve(renamed[0])
    with file:
        assert file.read() == b"a"


def test_put_under_a_given_name_is_idempotent(store, data_dir) -> None:
    name = parse_name("202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin")
    for expected in (True, False):
        with Upload(data_dir) as upload:
            upload.write(b"replicated")
            assert store.put(upload, name.unidentified_variant()) is expected
    store.identify([name.unidentified_variant()])
    with Upload(data_dir) as upload:  # identified since: still a duplicate
        upload.write(b"replicated")
        assert store.put(upload, name.unidentified_variant()) is False
    assert list(data_dir.temp.iterdir()) == []


def test_what_the_original_replicator_writes_is_served(store, data_dir) -> None:
    """replikate.php stores without a target queue as ``<source name>.bin-u.bin``; scan
    lists it, retrieve serves it, identify makes it ``.bin.bin`` as the original's does,
    and its name keeps its time and retention (for claireup)."""
    source = "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"
    odd = parse_name(source + "-u.bin")
    assert str(odd) == source + "-u.bin" and odd.retention_days == 30
    assert odd.store_dirs == parse_name(source).store_dirs
    folder = data_dir.store.joinpath(*odd.store_dirs)
    folder.mkdir(parents=True)
    (folder / str(odd)).write_bytes(b"from the original")
    assert store.scan() == [str(odd)]
    name, file, _ = store.retrieve(str(odd))
    with file:
        assert (name, file.read()) == (str(odd), b"from the original")
    assert store.identify([odd]) == [source + ".bin"]
    assert (folder / (source + ".bin")).read_bytes() == b"from the original"


_NAME = "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"
FULLWIDTH = {ord(d): 0xFF10 + int(d) for d in "0123456789"}
ARABIC_INDIC = {ord(d): 0x0660 + int(d) for d in "0123456789"}


@pytest.mark.parametrize(
    "text",
    [
        _NAME[:4].translate(FULLWIDTH) + _NAME[4:],
        _NAME[:19] + _NAME[19:23].translate(FULLWIDTH) + _NAME[23:],
        _NAME[:14] + _NAME[14:18].translate(ARABIC_INDIC) + _NAME[18:],
    ],
)
def test_names_take_ascii_digits_only(text: str) -> None:
    """int() reads these digits, the file system and the original do not: a source
    sending such a name once made replikate fail on every run (issue 15)."""
    assert not text.isascii()
    with pytest.raises(InvalidInput):
        parse_name(text)
