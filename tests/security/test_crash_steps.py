"""A publisher dying at every step of publish, as a process crash and as a power loss.

``crash_child`` publishes A (acknowledged), then B with a nonce and a TTL, and dies
right after one step of B's publish (docs/durability.md lists them). Then:

* process crash (kill -9): the volume as the dead process left it. What the page cache
  holds survives, so the outcome of every step is known exactly.
* power loss: the volume is ext4 on a loop device with a 10-minute journal commit
  interval; right after the death its backing image is copied, and the copy is what a
  disk would hold had the power gone then: every write the file system had sent to the
  device, nothing only in its page cache. Mounting the copy replays the journal, as a
  reboot would, and the recovery runs as after a reboot (another boot id). (Without
  root, mkfs.ext4 or a free loop device this part is skipped.)

In both, whatever recovers the queue (the next reader or publisher) must leave: A
there and whole (it was acknowledged); B whole or absent, never torn; nothing a
consumer saw before recovery preceded by a name appearing later; the nonce marked
exactly when B is there (so a retry neither stores it twice nor is lost) and B's TTL
known; no file in the queue directory a consumer cannot fetch; and the retry of B with
its nonce leaves exactly one B. With ``interval`` durability a power loss may lose B
even once acknowledged (never A, whose log was flushed by the checkpoint before B), and
a B that cannot be proven whole is moved aside, not served.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.crash_child import BODY_A, BODY_B, JOURNAL_COMMITTED, STEPS, nonce_of
from tests.security.figures import TALLY
from tests.support.queues import publish_body, queue_contents
from tests.support.volumes import run
from zosciimq.core import DataDir, QueueStore
from zosciimq.core import wal as walfile

REPO = Path(__file__).resolve().parents[2]
BODY_C = b"C" * 3000
LOGGED = STEPS.index("logged")
# Where B stands after each step: "absent", "present", or "either" (power loss only).
AFTER_PROCESS_CRASH = {s: "absent" if i < LOGGED else "present" for i, s in enumerate(STEPS)}
AFTER_POWER_LOSS = {
    s: "absent" if i < LOGGED else "either" if s == "logged" else "present"
    for i, s in enumerate(STEPS)
}
AFTER_POWER_LOSS_INTERVAL = {s: "absent" if i < LOGGED else "either" for i, s in enumerate(STEPS)}


def crash(
    data_dir: Path, queue: str, step: str, mode: str = "sync"
) -> tuple[dict[str, str], list[dict]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.security.crash_child", str(data_dir), queue, step, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    acked, trace = {}, []
    for line in done.stdout.splitlines():
        if line.startswith("acked "):
            _, which, name = line.split()
            acked[which] = name
        elif line.startswith("{"):
            trace.append(json.loads(line))
    TALLY["crash steps: faults injected"] += 1
    return acked, trace


def check_recovery(data_dir: Path, queue: str, acked: dict[str, str], step: str, expect: str):
    """The invariants after a crash at ``step``; returns whether B was there."""
    layout = DataDir(data_dir)
    first = queue_contents(layout, queue)  # a consumer arriving right after the crash
    names = [name for name, _ in first]
    assert names == sorted(names)
    assert (acked["A"], BODY_A) in first, "acknowledged A lost"
    others = [body for name, body in first if name != acked["A"]]
    assert others in ([], [BODY_B]), "a torn or foreign message is visible"
    b_there = others == [BODY_B]
    if expect != "either":
        assert b_there == (expect == "present"), f"B {expect} expected after {step}"
    if "B" in acked and b_there:
        assert acked["B"] in names
    marked = layout.nonce_path(nonce_of(queue)).exists()
    assert marked == b_there, "the nonce marker and B disagree: a retry would be lost or doubled"
    if b_there:
        b_name = next(name for name, body in first if body == BODY_B)
        assert b_name in QueueStore(layout).expiries(queue, [b_name]), "B's TTL was lost"

    c_name = publish_body(QueueStore(layout), queue, BODY_C).name  # the next publisher
    second = queue_contents(layout, queue)
    assert second[: len(first)] == first, "something appeared before what was already seen"
    assert second[-1] == (c_name, BODY_C)

    # the client whose acknowledgement was lost
    retry = publish_body(QueueStore(layout), queue, BODY_B, nonce=nonce_of(queue))
    final = queue_contents(layout, queue)
    assert sum(body == BODY_B for _, body in final) == 1 and retry.duplicate == b_there
    served = {name for name, _ in final}
    on_disk = {p.name for p in layout.queue_dir(queue).iterdir() if p.name.endswith(".bin")}
    assert on_disk == served, f"in the directory, never served: {on_disk - served}"
    TALLY["crash steps: messages verified"] += 1 + int("B" in acked)
    return b_there


# A process per step; the fast tier crashes at the last step before B is there, the
# first after which it is (logged, not flushed, not renamed), after the rename and after
# the acknowledgement.
FAST_STEPS = frozenset({"pending", "logged", "renamed", "acked"})


@pytest.mark.parametrize(
    "step", [s if s in FAST_STEPS else pytest.param(s, marks=pytest.mark.slow) for s in STEPS]
)
def test_process_crash_at_each_step(tmp_path: Path, step: str) -> None:
    data_dir = tmp_path / "data"
    acked, _ = crash(data_dir, "q", step)
    assert ("B" in acked) == (step == "acked")
    check_recovery(data_dir, "q", acked, step, AFTER_PROCESS_CRASH[step])


@pytest.fixture(scope="module")
def ext4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(backing image, mount point) of a small ext4 that commits its journal only on fsync."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root and mkfs.ext4 for a loop-mounted ext4")
    root = tmp_path_factory.mktemp("ext4")
    image, point = root / "disk.img", root / "mnt"
    point.mkdir()
    with open(image, "wb") as file:
        file.truncate(64 << 20)
    if run("mkfs.ext4", "-q", "-F", str(image)).returncode != 0:
        pytest.skip("mkfs.ext4 failed")
    mounted = run("mount", "-o", "loop,commit=600", str(image), str(point))
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount ext4: {mounted.stderr.strip()}")
    yield image, point
    run("umount", str(point))


def power_loss(
    ext4: tuple[Path, Path], tmp_path: Path, queue: str, step: str, mode: str, expect: str
) -> bool:
    """Crash at ``step``, then recover a copy of the disk as after a reboot."""
    image, point = ext4
    acked, _ = crash(point / "data", queue, step, mode)
    copy, after_reboot = tmp_path / "after-power-loss.img", tmp_path / "mnt"
    shutil.copyfile(image, copy)  # the disk as the power went
    after_reboot.mkdir()
    mounted = run("mount", "-o", "loop", str(copy), str(after_reboot))
    assert mounted.returncode == 0, mounted.stderr
    real_boot = walfile.boot_id
    walfile.boot_id = lambda: "a-boot-after-the-power-loss"  # type: ignore[assignment]
    try:
        b_there = check_recovery(after_reboot / "data", queue, acked, step, expect)
        suspects = after_reboot / "data" / ".zoscii" / "suspect" / queue
        moved = sorted(p.read_bytes() for p in suspects.iterdir()) if suspects.exists() else []
        assert len(moved) <= 1 and all(BODY_B.startswith(m) for m in moved), "moved: not B"
        if mode == "sync":
            assert not moved, "sync durability proved everything it acknowledged"
        if step == JOURNAL_COMMITTED:
            assert len(moved) == 1, "B's name reached the disk without its record: not moved"
    finally:
        walfile.boot_id = real_boot  # type: ignore[assignment]
        # The recovery's store may still hold its queue files open (they close when
        # idle): detach lazily then, or the copy stays mounted after the run.
        if run("umount", str(after_reboot)).returncode != 0:
            run("umount", "--lazy", str(after_reboot))
    print(f"power loss after {step} ({mode}): B {'there' if b_there else 'absent'}")
    return b_there


@pytest.mark.slow  # a loop-mounted ext4, copied and mounted again per step
@pytest.mark.parametrize("step", STEPS)
def test_power_loss_at_each_step(ext4: tuple[Path, Path], tmp_path: Path, step: str) -> None:
    power_loss(ext4, tmp_path, f"p-{step}", step, "sync", AFTER_POWER_LOSS[step])


def test_an_acknowledged_message_outlives_a_power_loss_by_its_log_alone(
    ext4: tuple[Path, Path], tmp_path: Path
) -> None:
    """The heart of the write-ahead log: B's file was never flushed, yet B is there."""
    assert power_loss(ext4, tmp_path, "p-fast-acked", "acked", "sync", "present")


@pytest.mark.parametrize("step", ["renamed", JOURNAL_COMMITTED, "acked"])
def test_power_loss_with_interval_durability(
    ext4: tuple[Path, Path], tmp_path: Path, step: str
) -> None:
    """B renamed while its record was not yet flushed: after the power loss B is gone,
    or (its name reached the disk, its bytes perhaps not) moved aside, never served."""
    expect = AFTER_POWER_LOSS_INTERVAL.get(step, "absent")
    power_loss(ext4, tmp_path, f"i-{step}", step, "interval", expect)


@pytest.mark.parametrize("step", ["logged", "committed"])
def test_process_crash_with_interval_durability(tmp_path: Path, step: str) -> None:
    """kill -9 loses nothing logged in ``interval`` either: the page cache survives."""
    acked, _ = crash(tmp_path / "data", "q", step, "interval")
    check_recovery(tmp_path / "data", "q", acked, step, AFTER_PROCESS_CRASH[step])


def test_the_order_of_durable_steps(tmp_path: Path) -> None:
    """The calls an acknowledged publish makes, in the order docs/durability.md gives,
    and its only flush: one of the write-ahead log."""
    acked, trace = crash(tmp_path / "data", "q", "acked")
    name = acked["B"]

    def position(event: str, after: int = -1, **match: object) -> int:
        for number, entry in enumerate(trace):
            if (
                number > after
                and entry["event"] == event
                and all(str(entry.get(k, "")).endswith(str(v)) for k, v in match.items())
            ):
                return number
        raise AssertionError(f"no {event} {match} after {after} in {trace}")

    index, wal = "index/q.idx", "index/q.wal"
    records = next(
        n for n, e in enumerate(trace) if e["event"] == "pwrite" and e["path"].endswith(index)
    )
    assert trace[records]["offset"] >= 512
    pending = position("pwrite", records, path=index, offset=0)
    logged = next(
        n
        for n, e in enumerate(trace)
        if e["event"] == "pwrite" and e["path"].endswith(wal) and e["offset"] >= 4096
    )
    flushed = position("fdatasync", logged, path=wal)
    renamed = position("rename", dst=name)
    marker = position("create", path="nonce/n-q")
    committed = position("pwrite", marker, path=index, offset=0)
    assert records < pending < logged < flushed < renamed < marker < committed, trace
    flushes = [e for e in trace if e["event"] in ("fsync", "fdatasync")]
    assert [e["path"].endswith(wal) for e in flushes] == [True], f"flushes: {flushes}"
