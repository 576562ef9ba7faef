import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest

from zosciimq.core import parse_name
from zosciimq.core.names import (
    clean_nonce,
    clean_pointer,
    clean_queue,
    clean_retention,
    format_stamp,
    new_name,
    store_dirs,
)
from zosciimq.errors import InvalidInput

VECTORS = Path(__file__).resolve().parents[1] / "fixtures" / "store-paths.tsv"


def vectors() -> list[dict[str, str]]:
    with open(VECTORS, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.mark.parametrize("row", vectors(), ids=lambda row: row["name"][:18])
def test_store_fan_out_matches_the_original(row: dict[str, str]) -> None:
    assert "/".join(store_dirs(row["name"])) == row["store_dirs"]
    assert "/".join(parse_name(row["name"]).store_dirs) == row["store_dirs"]


def test_vectors_are_all_there() -> None:
    assert len(vectors()) == 7


def test_parse_and_format_round_trip() -> None:
    text = "202511021826110003-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"
    name = parse_name(text)
    assert (name.stamp, name.counter, name.retention_days) == ("20251102182611", 3, 30)
    assert str(name) == text and len(text) == 64
    assert name.published_at == datetime(2025, 11, 2, 18, 26, 11, tzinfo=UTC)
    assert str(name.unidentified_variant()).endswith("-u.bin")
    assert name.unidentified_variant().identified() == name


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin",
        "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d",
        "202511021826110000-0030-9CC1980A-1719-440a-9650-6991c9cba11d.bin",
        "202513021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin",  # month 13
        "202502301826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin",  # 30 February
        "202511021826110000-030-9cc1980a-1719-440a-9650-6991c9cba11d.bin",
        "../202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin",
        "202511021259550001-0005-be2b00c1-9419-4661-x8c1d-2219780c7980-u.bin",
    ],
)
def test_malformed_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput, match="Invalid name"):
        parse_name(bad)


def test_names_are_utc_whatever_the_input_zone() -> None:
    from datetime import timedelta, timezone

    sydney = datetime(2026, 1, 1, 10, 0, 0, tzinfo=timezone(timedelta(hours=11)))
    assert format_stamp(sydney) == "20251231230000"
    with pytest.raises(ValueError):
        format_stamp(datetime(2026, 1, 1))  # naive: refuse rather than guess
    assert new_name(sydney, 7).stamp == "20251231230000"


def test_queue_rules() -> None:
    assert clean_queue("Customer_A-1") == "customer_a-1"
    for bad in ["", "a b", "a/b", "..", "é", "a" * 129, "temp", "TEMP"]:
        with pytest.raises(InvalidInput):
            clean_queue(bad)


def test_nonce_rules() -> None:
    assert clean_nonce("") is None and clean_nonce(None) is None
    assert clean_nonce("A1b2-c3_d4") == "A1b2-c3_d4"  # case kept: nonces are opaque
    for bad in ["a b", "../x", "x" * 129, "ñ"]:
        with pytest.raises(InvalidInput):
            clean_nonce(bad)


def test_retention_rules() -> None:
    assert clean_retention(None, 0) == 0 and clean_retention("", 5) == 5
    assert clean_retention("0030", 0) == 30 and clean_retention("9999", 0) == 9999
    for bad in ["-1", "10000", "1.5", "abc", "٣", " 7"]:
        with pytest.raises(InvalidInput):
            clean_retention(bad, 0)


def test_pointer_rules() -> None:
    good = "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"
    assert clean_pointer("") == "" and clean_pointer(good) == good
    for bad in ["x", "../../etc/passwd", good[:-4]]:
        with pytest.raises(InvalidInput, match="Invalid pointer"):
            clean_pointer(bad)
