"""kill -9 of the replicator in the middle of a run: no duplicate and no gap afterwards."""

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

from tests.replikate.conftest import local_messages
from tests.replikate.test_replicate_api import publish_all

REPO = Path(__file__).resolve().parents[2]


def replikate_env(data_dir: Path, config: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ZOSCII_DATA_DIR": str(data_dir),
        "ZOSCII_REPLIKATE_CONFIG": str(config),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "services" / "replikate")]),
    }


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
        f'target_queue = "{tq}"\nmax_messages_per_run = 100000\n'
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
    local = [data for _, data in local_messages(data_dir, tq)]
    assert local == [data for _, data in at_source]  # every message once, in order
    pointer = (data_dir / "states" / f"replikate_state_{sq}_{tq}.txt").read_text()
    assert pointer == at_source[-1][0]
