"""statissa at scale (issue 18): local[*], a two-worker cluster, a plain scandir walk and
``find`` over the same tree of message files, in alternating rounds.

The tree is generated straight on disk (``bench.statissa_bench.build``: empty-or-sparse
files with names in the real format, spread over 100 queues) for each file count, then
every round runs each mode once, the order rotating from round to round:

- ``local``: ``python -m zoscii_statissa --once`` with ``local[*]``, Spark's start
  included, with a class-data archive made for this host first as the image build makes
  its own (``zoscii_statissa.class_archive``; made once, not timed in the rounds);
- ``cluster``: the same in a zoscii/statissa container against a master and two workers
  from the same image, the tree bind-mounted read-only at /data (Docker and the image
  needed; else skipped); the time is the driver container's whole run;
- ``scandir``: ``zoscii_statissa.scan.scan_locally`` (the Python-only scan) in a child;
- ``find``: ``find DIR -type f -name '*.bin' -printf '%s\\n'`` summed, the floor.

Memory is sampled from /proc every 50 ms: ``tree`` is the RSS of the whole process tree
(in local mode that includes Spark's Python workers, the executors), ``driver`` the
tree without them (the Python driver and its JVM); for the cluster, the driver
container's processes (its executors run in the workers). The load average at each
round is recorded: the figures are only as quiet as the machine.

    python -m bench.spark_scale [--files 100000,1000000] [--rounds 3] [--ten-million]
                                [--no-cluster] [--dir DIR] [--keep]
    make bench-statissa-scale             # 100k and 1M, 3 rounds (docs/benchmarks.md)

With ``--keep`` the trees stay in ``DIR/tree-<files>`` and a later run reuses them (a 10M
tree takes a quarter of an hour to generate; put DIR on a file system with 10M free
inodes, ``df -i``). Not part of ``make bench-quick``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.statissa_bench import build

DEFAULT_FILES = (100_000, 1_000_000)
IMAGE = os.environ.get("ZOSCII_BENCH_STATISSA_IMAGE", "zoscii/statissa:dev")
QUEUES = 100
WORKERS = 2
WORKERS_TIMEOUT = 120.0
EXECUTORS = "pyspark.daemon"  # local mode's Python workers: forks of this module


@dataclass
class Run:
    """One mode's one run: wall seconds, peak RSS (bytes) and the messages it counted."""

    seconds: float
    messages: int
    tree_rss: int = 0
    driver_rss: int = 0


# --- memory sampling ---------------------------------------------------------------------
def _processes() -> dict[int, list[int]]:
    """Children of every process, from /proc."""
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
    return children


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _is_executor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return EXECUTORS.encode() in cmdline.read()
    except OSError:
        return False


def tree_rss(pid: int) -> tuple[int, int]:
    """(RSS of the tree under ``pid``, RSS of it without local mode's Python workers)."""
    children = _processes()
    tree = driver = 0
    stack = [(pid, False)]
    while stack:
        current, in_executor = stack.pop()
        in_executor = in_executor or _is_executor(current)
        rss = _rss(current)
        tree += rss
        driver += 0 if in_executor else rss
        stack.extend((child, in_executor) for child in children.get(current, []))
    return tree, driver


class Sampler:
    """Peak RSS of a process tree, sampled every 50 ms until ``stop``."""

    def __init__(self, pid: Callable[[], int | None]) -> None:
        self._pid = pid
        self.tree = self.driver = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            pid = self._pid()
            if pid:
                tree, driver = tree_rss(pid)
                self.tree, self.driver = max(self.tree, tree), max(self.driver, driver)
            time.sleep(0.05)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[Run, str]:
    """One command's run (its tree sampled) and its stdout."""
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    sampler = Sampler(lambda: child.pid)
    output, _ = child.communicate()
    seconds = time.monotonic() - started
    sampler.stop()
    if child.returncode != 0:
        raise RuntimeError(f"{command[:4]} exited {child.returncode}")
    return Run(seconds, 0, sampler.tree, sampler.driver), output


# --- the modes ---------------------------------------------------------------------------
def run_local(data: Path, work: Path, archive: Path) -> Run:
    env = {
        **os.environ,
        "ZOSCII_SPARK_MASTER": "local[*]",
        "ZOSCII_SPARK_LOCAL_DIR": str(work),
        "ZOSCII_SPARK_CLASS_ARCHIVE": str(archive),
    }
    env.pop("ZOSCII_SPARK_CONF", None)
    command = [sys.executable, "-m", "zoscii_statissa", "--once", "--data-dir", str(data)]
    run, output = timed(command, env)
    run.messages = json.loads(output)["totals"]["messages"]
    return run


def run_scandir(data: Path) -> Run:
    script = (
        "import json,sys,time;from zosciimq.core.layout import DataDir;"
        "from zoscii_statissa.compute import compute_snapshot;"
        "from zoscii_statissa.scan import scan_locally;"
        "s=compute_snapshot(scan_locally, DataDir(sys.argv[1]), time.time());"
        "print(json.dumps({'messages': s.total_messages}))"
    )
    run, output = timed([sys.executable, "-c", script, str(data)])
    run.messages = json.loads(output)["messages"]
    return run


def run_find(data: Path) -> Run:
    started = time.monotonic()
    done = subprocess.run(
        ["find", str(data / "queues"), "-type", "f", "-name", "*.bin", "-printf", "%s\\n"],
        capture_output=True,
        check=True,
    )
    total = sum(int(line) for line in done.stdout.split())
    del total  # summed, as a tool would; the count is what the others report
    return Run(time.monotonic() - started, done.stdout.count(b"\n"))


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

    def _docker_run(self, name: str, *args: str) -> str:
        """Start a detached container on the bench's network; its id."""
        started = subprocess.run(
            ["docker", "run", "-d", "--name", f"{self.tag}-{name}", "--network", self.tag,
             "--network-alias", name, "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
             "--security-opt", "no-new-privileges:true", "-e", "HOME=/tmp",
             "-e", "SPARK_LOCAL_DIRS=/tmp", "-v", f"{self.data}:/data:ro", *args],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        self.names.append(f"{self.tag}-{name}")
        return started.stdout.strip()

    def start(self) -> float:
        """Master and workers up; the seconds until the master counted both workers alive."""
        started = time.monotonic()
        subprocess.run(["docker", "network", "create", self.tag], check=True, capture_output=True)
        master = "org.apache.spark.deploy.master.Master"
        self._docker_run("spark-master", IMAGE, "spark-class", master, "--host", "spark-master")
        for worker in range(1, WORKERS + 1):
            self._docker_run(f"spark-worker-{worker}", IMAGE, "spark-class",
                             "org.apache.spark.deploy.worker.Worker",
                             "--host", f"spark-worker-{worker}", "--cores", "1",
                             "--memory", "1g", "--work-dir", "/tmp/spark-work",
                             "spark://spark-master:7077")  # fmt: skip
        self.wait_for_workers()
        return time.monotonic() - started

    def alive_workers(self) -> int:
        """Alive workers as the master's JSON (:8080/json/) counts them, from inside it."""
        probe = (
            "import json,urllib.request;"
            "w=json.load(urllib.request.urlopen('http://127.0.0.1:8080/json/',timeout=3));"
            "print(sum(x.get('state')=='ALIVE' for x in w.get('workers',[])))"
        )
        asked = subprocess.run(
            ["docker", "exec", f"{self.tag}-spark-master", "python", "-c", probe],
            capture_output=True, text=True,
        )  # fmt: skip
        return int(asked.stdout.strip()) if asked.returncode == 0 else 0

    def wait_for_workers(self) -> None:
        deadline = time.monotonic() + WORKERS_TIMEOUT
        while self.alive_workers() < WORKERS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the master did not see {WORKERS} workers alive")
            time.sleep(0.5)

    def run(self) -> Run:
        conf = (
            "spark.driver.host=statissa,spark.driver.bindAddress=0.0.0.0,"
            "spark.shuffle.mapStatus.compression.codec=lz4,spark.executor.memory=512m"
        )
        name = f"driver-{uuid.uuid4().hex[:6]}"
        started = time.monotonic()
        container = self._docker_run(
            name, "-e", "ZOSCII_SPARK_MASTER=spark://spark-master:7077",
            "-e", f"ZOSCII_SPARK_CONF={conf}", "--network-alias", "statissa",
            IMAGE, "python", "-m", "zoscii_statissa", "--once",
        )  # fmt: skip
        sampler = Sampler(_ContainerPid(container))
        waited = subprocess.run(["docker", "wait", container], capture_output=True, text=True)
        seconds = time.monotonic() - started
        sampler.stop()
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        subprocess.run(["docker", "rm", "-f", "-v", container], capture_output=True)
        self.names.remove(f"{self.tag}-{name}")
        if waited.stdout.strip() != "0":
            raise RuntimeError(f"cluster driver exited {waited.stdout.strip()}: {logs.stderr}")
        messages = json.loads(logs.stdout)["totals"]["messages"]
        return Run(seconds, messages, sampler.tree, sampler.driver)

    def stop(self) -> None:
        for name in self.names:
            subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True)
        subprocess.run(["docker", "network", "rm", self.tag], capture_output=True)


class _ContainerPid:
    """The host pid of a container's first process, asked of Docker until it is known."""

    def __init__(self, container: str) -> None:
        self._container = container
        self._pid: int | None = None

    def __call__(self) -> int | None:
        if self._pid is None:
            inspected = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Pid}}", self._container],
                capture_output=True, text=True,
            )  # fmt: skip
            self._pid = int(inspected.stdout.strip() or 0) or None
        return self._pid


# --- rounds ------------------------------------------------------------------------------
def summary(values: list[float], digits: int = 2) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "all": [round(v, digits) for v in values],
    }


def tree_for(files: int, parent: Path, keep: bool) -> tuple[Path, float | None]:
    """``parent/tree-<files>``, generated unless a kept one is there; its generation time."""
    base = parent / f"tree-{files}"
    marker = base / "built.json"
    if marker.exists():
        return base, None
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    os.chmod(base, 0o755)  # the containers' user reads the bind mount
    now = datetime.now(UTC).replace(microsecond=0)
    seconds = build(base / "data", files, QUEUES, now)
    if keep:
        marker.write_text(json.dumps({"files": files, "queues": QUEUES, "seconds": seconds}))
    return base, seconds


def measure(
    files: int, rounds: int, parent: Path, *, cluster: bool = True, keep: bool = False
) -> dict[str, Any]:
    base, generated = tree_for(files, parent, keep)
    data, work = base / "data", parent / f"spark-{os.getpid()}"
    result: dict[str, Any] = {"files": files, "queues": QUEUES, "rounds": rounds}
    if generated is not None:
        result["generate_seconds"] = round(generated, 1)
    clustered: Cluster | None = None
    archive = parent / f"spark-classes-{os.getpid()}.jsa"
    started = time.monotonic()
    subprocess.run(  # a process of its own, as the image build: it ends its JVM
        [sys.executable, "-m", "zoscii_statissa.class_archive", str(archive)],
        env={**os.environ, "ZOSCII_SPARK_LOCAL_DIR": str(work)},
        check=True,
    )
    result["class_archive_seconds"] = round(time.monotonic() - started, 1)
    try:
        modes: dict[str, Callable[[], Run]] = {
            "local": lambda: run_local(data, work, archive),
            "scandir": lambda: run_scandir(data),
            "find": lambda: run_find(data),
        }
        problem = Cluster.available() if cluster else "disabled"
        if problem is None:
            clustered = Cluster(data)
            result["cluster_start_seconds"] = round(clustered.start(), 1)
            modes["cluster"] = clustered.run
        else:
            result["cluster_skipped"] = problem
        runs: dict[str, list[Run]] = {mode: [] for mode in modes}
        loads: list[float] = []
        order = list(modes)
        for number in range(rounds):
            loads.append(os.getloadavg()[0])
            for mode in order[number % len(order) :] + order[: number % len(order)]:
                run = modes[mode]()
                if run.messages != files:
                    raise RuntimeError(f"{mode} counted {run.messages} of {files}")
                runs[mode].append(run)
                print(f"{files} files {mode}: {run.seconds:.2f}s tree "
                      f"{run.tree_rss / 2**20:.0f} MiB driver {run.driver_rss / 2**20:.0f} MiB",
                      file=sys.stderr, flush=True)  # fmt: skip
        result["load_average_1m"] = summary(loads)
        for mode, done in runs.items():
            result[mode] = {"seconds": summary([r.seconds for r in done])}
            if mode != "find":
                result[mode]["tree_rss_mib"] = summary([r.tree_rss / 2**20 for r in done], 0)
                result[mode]["driver_rss_mib"] = summary([r.driver_rss / 2**20 for r in done], 0)
        find_median = result["find"]["seconds"]["median"]
        result["vs_find"] = {
            mode: round(result[mode]["seconds"]["median"] / find_median, 2)
            for mode in runs
            if mode != "find"
        }
    finally:
        if clustered:
            clustered.stop()
        shutil.rmtree(work, ignore_errors=True)
        archive.unlink(missing_ok=True)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return result


def table(results: list[dict[str, Any]]) -> str:
    """The Markdown rows docs/benchmarks.md shows: median (range), ratio to find."""
    modes = ("local", "cluster", "scandir", "find")
    lines = [
        "| files | rounds | " + " | ".join(f"{m} s" for m in modes)
        + " | local / find | local driver MiB | local tree MiB | cluster driver MiB |",
        "|---" * (len(modes) + 6) + "|",
    ]  # fmt: skip

    def cell(result: dict[str, Any], mode: str, key: str = "seconds", digits: int = 2) -> str:
        if mode not in result:
            return "-"
        s = result[mode][key]
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    for r in results:
        lines.append(
            f"| {r['files']:,} | {r['rounds']} | "
            + " | ".join(cell(r, m) for m in modes)
            + f" | {r['vs_find']['local']}x | {cell(r, 'local', 'driver_rss_mib', 0)} | "
            f"{cell(r, 'local', 'tree_rss_mib', 0)} | {cell(r, 'cluster', 'driver_rss_mib', 0)} |"
        )
    return "\n".join(lines)


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
    parser.add_argument("--ten-million", action="store_true", help="add 10M (inodes, time)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-cluster", action="store_true")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")))
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) DIR/tree-<files>")
    args = parser.parse_args()
    results = []
    for files in file_counts(args.files, args.ten_million):
        result = measure(files, args.rounds, args.dir, cluster=not args.no_cluster, keep=args.keep)
        print(json.dumps(result), flush=True)
        results.append(result)
    print(table(results), file=sys.stderr)


if __name__ == "__main__":
    main()
