"""The fast expiry rule agrees with the contract (MessageName.expires_at) everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from zoscii_claireup.retention import ExpiryRule, expired_by_definition, older_than
from zosciimq.core import MessageName, parse_name

GUID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def name_at(published: datetime, retention_days: int) -> MessageName:
    stamp = (
        f"{published.year:04d}{published.month:02d}{published.day:02d}"
        f"{published.hour:02d}{published.minute:02d}{published.second:02d}"
    )
    return parse_name(f"{stamp}0000-{retention_days:04d}-{GUID}.bin")


whole_seconds = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(
    lambda moment: moment.replace(microsecond=0, tzinfo=UTC)
)
any_now = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=13)), timezone(-timedelta(hours=10))]),
)


@given(published=whole_seconds, retention=st.integers(0, 9999), now=any_now)
@example(
    published=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    retention=9999,
    now=datetime.max.replace(tzinfo=UTC),
)
@example(published=datetime(1, 1, 1, tzinfo=UTC), retention=9999, now=datetime(1, 1, 2, tzinfo=UTC))
@example(  # before year 1 in UTC: found by this test in CI (astimezone overflowed)
    published=datetime(1, 1, 1, tzinfo=UTC),
    retention=0,
    now=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=13))),
)
@example(  # past year 9999 in UTC
    published=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    retention=0,
    now=datetime(9999, 12, 31, 23, 0, tzinfo=timezone(-timedelta(hours=10))),
)
def test_rule_matches_expires_at_for_any_name_and_time(published, retention, now):
    name = name_at(published, retention)
    assert ExpiryRule(now).expired(name) == expired_by_definition(name, now)


@given(published=whole_seconds, retention=st.integers(0, 9999), offset=st.integers(-2, 2))
def test_rule_matches_expires_at_around_the_second_of_expiry(published, retention, offset):
    name = name_at(published, retention)
    try:
        expiry = name.expires_at
    except OverflowError:
        return  # past year 9999: covered by the test above (never expires)
    for delta in (timedelta(seconds=offset), timedelta(microseconds=offset)):
        try:
            now = expiry + delta
        except OverflowError:
            continue
        assert ExpiryRule(now).expired(name) == (now >= expiry)


@pytest.mark.parametrize(
    ("published", "retention", "now", "expired"),
    [
        # RRRR 0000: due at the first run at or after the second it was published
        (datetime(2025, 6, 15, 12, 0, 0), 0, datetime(2025, 6, 15, 12, 0, 0), True),
        (datetime(2025, 6, 15, 12, 0, 1), 0, datetime(2025, 6, 15, 12, 0, 0, 999999), False),
        # one second before expiry kept, at expiry deleted
        (datetime(2025, 6, 14, 12, 0, 0), 1, datetime(2025, 6, 15, 11, 59, 59), False),
        (datetime(2025, 6, 14, 12, 0, 0), 1, datetime(2025, 6, 15, 12, 0, 0), True),
        # leap day: 2024-02-28 + 1 day is 2024-02-29, not 2024-03-01
        (datetime(2024, 2, 28, 10, 0, 0), 1, datetime(2024, 2, 29, 9, 59, 59), False),
        (datetime(2024, 2, 28, 10, 0, 0), 1, datetime(2024, 2, 29, 10, 0, 0), True),
        (datetime(2024, 2, 29, 10, 0, 0), 1, datetime(2024, 3, 1, 10, 0, 0), True),
        # 9999 days from 2000-01-01 is 2027-05-18
        (datetime(2000, 1, 1, 0, 0, 0), 9999, datetime(2027, 5, 17, 23, 59, 59), False),
        (datetime(2000, 1, 1, 0, 0, 0), 9999, datetime(2027, 5, 18, 0, 0, 0), True),
        # an expiry past year 9999 never comes
        (datetime(9999, 1, 1, 0, 0, 0), 9999, datetime(9999, 12, 31, 23, 59, 59), False),
    ],
)
def test_boundaries(published, retention, now, expired):
    name = name_at(published.replace(tzinfo=UTC), retention)
    assert ExpiryRule(now.replace(tzinfo=UTC)).expired(name) is expired
    assert expired_by_definition(name, now.replace(tzinfo=UTC)) is expired


def test_the_time_zone_of_now_does_not_matter():
    name = name_at(datetime(2025, 6, 14, 12, 0, 0, tzinfo=UTC), 1)
    auckland_just_before = datetime(2025, 6, 16, 0, 59, 59, tzinfo=timezone(timedelta(hours=13)))
    assert not ExpiryRule(auckland_just_before).expired(name)
    assert ExpiryRule(auckland_just_before + timedelta(seconds=1)).expired(name)


def test_a_naive_now_is_refused():
    with pytest.raises(ValueError, match="naive"):
        ExpiryRule(datetime(2025, 1, 1))


def test_older_than_is_strict():
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert not older_than(now.timestamp() - 300, now, 300)
    assert older_than(now.timestamp() - 300.001, now, 300)
    assert not older_than(now.timestamp() + 10, now, 300)  # a future mtime is young
