"""The follower's memory of recent messages (``follow.Recent``): what it covers."""

from __future__ import annotations

from zoscii_live import follow
from zoscii_live.follow import Item, Recent


def items(*names: str) -> list[Item]:
    return [Item(name, 1, b"x") for name in names]


def test_it_covers_every_name_after_its_floor_and_nothing_before() -> None:
    recent = Recent()
    assert recent.after("a", 10) is None  # nothing read yet
    recent.reset("b")  # the cursor when the follower started
    assert recent.after("a", 10) is None  # before the floor: the disk must say
    assert recent.after("b", 10) == []  # caught up
    recent.extend(items("c", "d", "e"))
    assert [i.name for i in recent.after("b", 10) or []] == ["c", "d", "e"]
    assert [i.name for i in recent.after("cc", 10) or []] == ["d", "e"]  # a deleted pointer
    assert recent.after("e", 10) == []
    assert [i.name for i in recent.after("b", 2) or []] == ["c", "d"]  # at most the limit


def test_the_oldest_go_first_and_the_floor_follows(monkeypatch: object) -> None:
    monkeypatch.setattr(follow, "RECENT_MESSAGES", 2)  # type: ignore[attr-defined]
    recent = Recent()
    recent.reset("a")
    recent.extend(items("b", "c", "d"))
    assert recent.floor == "b"
    assert recent.after("a", 10) is None  # b was dropped: "after a" is not all here any more
    assert [i.name for i in recent.after("b", 10) or []] == ["c", "d"]
