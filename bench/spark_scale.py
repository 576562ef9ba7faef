"""statissa at scale (issue 18): local[*], a two-worker cluster, a plain scandir walk and
``find`` over the same tree of message files, in alternating rounds.

The tree is generated straight on disk (``bench.statissa_bench.build``: empty-or-tiny
files with names in the real format, spread over queues) for each file count, then
every round runs, in turn:

- ``local``: ``python -m zoscii_statissa --once`` with ``local[*]``, Spark's start
  included; the peak RSS of its process tree (Python driver + JVM + Python workers) is
  sampled from /proc every 50 ms;
- ``cluster``: the same on a master and two workers started from zoscii/statissa with
  the tree bind-mounted read-only at /data (Docker and the image needed; else skipped);
  the time is the driver container's whole run;
- ``scandir``: ``zoscii_statissa.scan.scan_locally`` (the Python-only scan), in-process
  child, same RSS sampling;
- ``find``: ``find DIR -type f -printf '%s\\n'`` summed, the floor.

    python -m bench.spark_scale [--files 100000,1000000] [--rounds 3] [--ten-million]
    ZOSCII_BENCH_SCALE_FILES=100000,1000000 make bench     # suite "statissa-scale"

Not part of ``make bench-quick``. Files are removed after each count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.statissa_bench import build

DEFAULT_FILES = (100_000, 1_000_000)
IMAGE = os.environ.get("ZOSCII_BENCH_STATISSA_IMAGE", "zoscii/statissa:dev")
QUEUES = 100


def _tree_rss(pid: int) -> int:
    """RSS bytes of a process and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except OSError:
            continue
    total, stack = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * page
        except OSError:
            pass
        stack.extend(children.get(current, []))
    return total


def _timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(seconds, peak tree RSS bytes, stdout) of one command."""
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(child.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = child.communicate()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"{command[:4]} exited {child.returncode}")
    return seconds, peak, output


def run_local(data: Path, work: Path) -> tuple[float, int, int]:
    env = {**os.environ, "ZOSCII_SPARK_MASTER": "local[*]", "ZOSCII_SPARK_LOCAL_DIR": str(work)}
    env.pop("ZOSCII_SPARK_CONF", None)
    command = [sys.executable, "-m", "zoscii_statissa", "--once", "--data-dir", str(data)]
    seconds, peak, output = _timed(command, env)
    return seconds, peak, json.loads(output)["totals"]["messages"]


def run_scandir(data: Path) -> tuple[float, int, int]:
    script = (
        "import json,sys,time;from zosciimq.core.layout import DataDir;"
        "from zoscii_statissa.compute import compute_snapshot;"
        "from zoscii_statissa.scan import scan_locally;"
        "s=compute_snapshot(scan_locally, DataDir(sys.argv[1]), time.time());"
        "print(json.dumps({'messages': s.total_messages}))"
    )
    seconds, peak, output = _timed([sys.executable, "-c", script, str(data)])
    return seconds, peak, json.loads(output)["messages"]


def run_find(data: Path) -> tuple[float, int, int]:
    started = time.monotonic()
    done = subprocess.run(
        ["find", str(data / "queues"), "-type", "f", "-name", "*.bin", "-printf", "%s\\n"],
        capture_output=True,
        check=True,
    )
    total = sum(int(line) for line in done.stdout.split())
    del total  # summed, as a tool would; the count is what the others report
    return time.monotonic() - started, 0, done.stdout.count(b"\n")


class Cluster:
    """A Spark master and two workers from the statissa image, the tree mounted ro."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.tag = f"zoscii-bench-spark-{uuid.uuid4().hex[:8]}"
        self.names: list[str] = []

    @staticmethod
    def available() -> str | None:
        if not shutil.which("docker"):
            return "no docker CLI"
        probe = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True)
        return None if probe.returncode == 0 else f"image {IMAGE} missing (make images)"

    def _run(self, name: str, *args: str) -> None:
        full = f"{self.tag}-{name}"
        subprocess.run(
            ["docker", "run", "-d", "--name", full, "--network", self.tag,
             "--network-alias", name, "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
             "--security-opt", "no-new-privileges:true", "-e", "HOME=/tmp",
             "-e", "SPARK_LOCAL_DIRS=/tmp", "-v", f"{self.data}:/data:ro", IMAGE, *args],
            check=True, capture_output=True,
        )  # fmt: skip
        self.names.append(full)

    def start(self) -> None:
        subprocess.run(["docker", "network", "create", self.tag], check=True, capture_output=True)
        self._run("spark-master", "spark-class", "org.apache.spark.deploy.master.Master",
                  "--host", "spark-master")  # fmt: skip
        for worker in ("spark-worker-1", "spark-worker-2"):
            self._run(worker, "spark-class", "org.apache.spark.deploy.worker.Worker",
                      "--host", worker, "--cores", "1", "--memory", "1g",
                      "--work-dir", "/tmp/spark-work", "spark://spark-master:7077")  # fmt: skip
        time.sleep(15)  # master up, workers registered

    def run(self) -> tuple[float, int, int]:
        conf = (
            "spark.driver.host=statissa,spark.driver.bindAddress=0.0.0.0,"
            "spark.shuffle.mapStatus.compression.codec=lz4,spark.executor.memory=512m"
        )
        command = [
            "docker", "run", "--rm", "--network", self.tag, "--network-alias", "statissa",
            "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges:true", "-v", f"{self.data}:/data:ro",
            "-e", "ZOSCII_SPARK_MASTER=spark://spark-master:7077",
            "-e", f"ZOSCII_SPARK_CONF={conf}", IMAGE, "python", "-m", "zoscii_statissa", "--once",
        ]  # fmt: skip
        seconds, _, output = _timed(command)
        return seconds, 0, json.loads(output)["totals"]["messages"]

    def stop(self) -> None:
        for name in self.names:
            subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True)
        subprocess.run(["docker", "network", "rm", self.tag], capture_output=True)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def measure(files: int, rounds: int, parent: Path, cluster: bool = True) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="zoscii-scale-", dir=parent))
    os.chmod(base, 0o755)  # the containers' user reads the bind mount
    result: dict[str, Any] = {"files": files, "queues": QUEUES, "rounds": rounds}
    clustered: Cluster | None = None
    try:
        now = datetime.now(UTC).replace(microsecond=0)
        result["generate_seconds"] = round(build(base / "data", files, QUEUES, now), 1)
        modes: dict[str, Any] = {
            "local": lambda: run_local(base / "data", base / "spark"),
            "scandir": lambda: run_scandir(base / "data"),
            "find": lambda: run_find(base / "data"),
        }
        problem = Cluster.available() if cluster else "disabled"
        if problem is None:
            clustered = Cluster(base / "data")
            clustered.start()
            modes["cluster"] = clustered.run
        else:
            result["cluster_skipped"] = problem
        times: dict[str, list[float]] = {m: [] for m in modes}
        rss: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(rounds):
            for mode, run in modes.items():
                seconds, peak, counted = run()
                if counted != files:
                    raise RuntimeError(f"{mode} counted {counted} of {files}")
                times[mode].append(seconds)
                rss[mode].append(peak / 2**20)
                print(f"{files} files {mode}: {seconds:.2f}s", file=sys.stderr, flush=True)
        for mode in modes:
            result[mode] = {"seconds": summary(times[mode])}
            if mode in ("local", "scandir"):
                result[mode]["peak_rss_mib"] = summary(rss[mode])
        find_median = result["find"]["seconds"]["median"]
        result["local_vs_find"] = round(result["local"]["seconds"]["median"] / find_median, 2)
    finally:
        if clustered:
            clustered.stop()
        shutil.rmtree(base, ignore_errors=True)
    return result


def file_counts(raw: str | None, ten_million: bool) -> list[int]:
    counts = [int(x) for x in raw.split(",")] if raw else list(DEFAULT_FILES)
    if ten_million and 10_000_000 not in counts:
        counts.append(10_000_000)
    return counts


def run(ctx: Any) -> dict[str, Any]:
    """The ``statissa-scale`` suite of bench.run: not in --quick."""
    from bench.external import NotAvailable

    if ctx.quick:
        raise NotAvailable("not in --quick (minutes of generation; make bench runs it)")
    counts = file_counts(
        os.environ.get("ZOSCII_BENCH_SCALE_FILES"),
        os.environ.get("ZOSCII_BENCH_SCALE_TEN_MILLION", "") == "1",
    )
    rounds = int(os.environ.get("ZOSCII_BENCH_SCALE_ROUNDS", "3"))
    return {"counts": [measure(n, rounds, Path(ctx.root)) for n in counts]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", help="comma-separated counts (default 100000,1000000)")
    parser.add_argument("--ten-million", action="store_true", help="add 10M (disk, time)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-cluster", action="store_true")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    for files in file_counts(args.files, args.ten_million):
        print(json.dumps(measure(files, args.rounds, args.dir, not args.no_cluster)), flush=True)


if __name__ == "__main__":
    main()
