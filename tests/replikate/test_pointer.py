"""A job's pointer file comes from the core's layout (``DataDir.state_path``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoscii_replikate.pointer import pointer_path
from zoscii_replikate.settings import JobConfig
from zosciimq.core import DataDir


class Elsewhere(DataDir):
    """A layout whose pointer files live in another directory."""

    def state_path(self, file_name: str) -> Path:
        return self.root / "pointers" / file_name


def job(**extra: str) -> JobConfig:
    return JobConfig(
        name="j", source_url="http://x/", source_queue="orders", target_queue="mirror", **extra
    )


def test_both_kinds_of_pointer_file_are_placed_by_the_layout(tmp_path: Path) -> None:
    assert pointer_path(DataDir(tmp_path), job()) == (
        tmp_path / "states" / "replikate_state_orders_mirror.txt"
    )
    elsewhere = Elsewhere(tmp_path)
    assert pointer_path(elsewhere, job()) == tmp_path / "pointers/replikate_state_orders_mirror.txt"
    own = job(pointer_file="replikate_state_orders_b.txt")
    assert pointer_path(elsewhere, own) == tmp_path / "pointers/replikate_state_orders_b.txt"


@pytest.mark.parametrize("name", ["", ".", "..", "../escape.txt", "a/b.txt", "/etc/passwd"])
def test_the_layout_refuses_a_pointer_file_outside_states(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="states/"):
        DataDir(tmp_path).state_path(name)
