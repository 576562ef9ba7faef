"""kill -9 of the replicator in the middle of a run: no duplicate and no gap afterwards.

The source is this project's api, so the replicator fetches and writes batches (one
``publish_many`` and one pointer save per batch): a kill lands before, inside or after a
batch write, or between a batch write and its pointer save.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.queues import queue_contents
from tests.support.replikate_jobs import publish_all, replikate_env
from zosciimq.core import DataDir, DataStore

REPO = Path(__file__).resolve().parents[2]


def count_files(path: Path) -> int:
    try:
        return sum(1 for name in os.listdir(path) if name.endswith(".bin"))
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_kill_9_in_the_middle_then_rerun_gives_no_duplicate_and_no_gap(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    sq, tq = "k" + uuid.uuid4().hex[:10], "mirror"
    rng = random.Random(7)
    payloads = [f"{i:05d}:".encode() + rng.randbytes(rng.randrange(0, 2000)) for i in range(600)]
    at_source = publish_all(source[0], sq, payloads, threads=4)
    config = tmp_path / "replikate.toml"
    config.write_text(
        f'[jobs.crash]\nsource_url = "{source[0]}"\nsource_queue = "{sq}"\n'
        f'target_queue = "{tq}"\nmax_messages_per_run = 100000\nbatch_count = 50\n'
    )
    data_dir = tmp_path / "data"
    env = replikate_env(data_dir, config)
    command = [sys.executable, "-m", "zoscii_replikate", "--once"]
    target_dir = data_dir / "queues" / tq

    kills = 0
    for _ in range(4):
        before = count_files(target_dir)
        process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        goal = before + rng.randrange(40, 120)
        deadline = time.monotonic() + 60
        while count_files(target_dir) < goal and time.monotonic() < deadline:
            if process.poll() is not None:
                break
            time.sleep(0.005)
        time.sleep(rng.random() * 0.05)  # land anywhere within a message
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        process.wait()
    assert kills >= 2, "the replicator finished before it could be killed: use a larger queue"

    finished = subprocess.run(command, env=env, capture_output=True, timeout=300)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    local = [data for _, data in queue_contents(data_dir, tq)]
    assert local == [data for _, data in at_source]  # every message once, in order
    pointer = (data_dir / "states" / f"replikate_state_{sq}_{tq}.txt").read_text()
    assert pointer == at_source[-1][0]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["queue", "store"])
def test_kill_9_between_a_batch_write_and_its_pointer_save(
    source: tuple[str, Path], tmp_path: Path, target: str
) -> None:
    """The third batch is written, then the process dies before saving its pointer: the
    rerun fetches that batch again, finds every message of it written, writes none of it
    twice and goes on to the end."""
    sq = "w" + uuid.uuid4().hex[:10]
    rng = random.Random(11)
    payloads = [f"{i:04d}:".encode() + rng.randbytes(rng.randrange(0, 3000)) for i in range(230)]
    at_source = publish_all(source[0], sq, payloads)
    names = [name for name, _ in at_source]
    label = "mirror" if target == "queue" else "store"
    target_line = 'target_queue = "mirror"\n' if target == "queue" else ""
    config = tmp_path / "replikate.toml"
    config.write_text(
        f'[jobs.crash]\nsource_url = "{source[0]}"\nsource_queue = "{sq}"\n{target_line}'
        "batch_count = 50\n"
    )
    data_dir = tmp_path / "data"
    env = replikate_env(data_dir, config)
    pointer_file = data_dir / "states" / f"replikate_state_{sq}_{label}.txt"

    def local() -> list[tuple[str, bytes]]:
        if target == "queue":
            return queue_contents(data_dir, "mirror")
        store = DataStore(DataDir(data_dir))
        out = []
        for name in store.scan():
            with store.retrieve(name)[1] as file:
                out.append((name, file.read()))
        return out

    died = subprocess.run(
        [sys.executable, "-m", "tests.replikate.crash_child", "3", "--once"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()[-2000:]
    assert died.stdout.decode().split() == ["dying-before-saving", names[149]]
    # three batches written, the pointer still at the end of the second
    assert [data for _, data in local()] == payloads[:150]
    assert pointer_file.read_text() == names[99]

    rerun = subprocess.run(
        [sys.executable, "-m", "zoscii_replikate", "--once"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    log = rerun.stderr.decode()
    assert rerun.returncode == 0, log[-2000:]
    assert f"50 of 50 message(s) up to {names[149]} were already written" in log
    assert "caught up, 130 message(s)" in log and ", 50 repeat(s)" in log  # 50 + 80 new
    got = local()
    assert [data for _, data in got] == payloads  # every message once, in order
    if target == "store":  # the store keeps the source names, with -u
        assert [name for name, _ in got] == [n.replace(".bin", "-u.bin") for n in names]
    assert pointer_file.read_text() == names[-1]
