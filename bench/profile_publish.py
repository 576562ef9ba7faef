"""Where a gunicorn worker's time goes while it publishes: ``make profile``.

Starts the api with one worker (so one pid holds every request) in the durability mode
asked for (``--durability``: ``ZOSCII_DURABILITY``, sync by default), publishes 1 KB
from 8 keep-alive clients to one queue (the bench's 8-client case; wrk, or Python
threads without it) and records that worker with
``py-spy record --gil --format raw`` meanwhile. ``--gil`` keeps only samples of a thread
holding the GIL: the Python work that competes for the one core a worker can use,
without the threads that sleep in ``accept``, ``poll`` or a lock. Prints the top
functions inclusive (on the stack) and self (running), as shares of the samples.

    .venv/bin/python -m bench.profile_publish [--durability sync|interval] [--seconds 10]
                                              [--server threads|loop] [--clients 8]
                                              [--top 25] [--data-dir DIR]

``--data-dir``: where the api's data directory goes (the disk measured; default $TMPDIR).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import load
from bench.contenders import DURABILITY
from bench.versus import FORM, publish_form
from tests.support.api_server import ApiServer
from zosciimq.core.checkpoint import file_system_of
from zosciimq.settings import DURABILITY_MODES

RATE = 500  # samples per second: a worker holds the GIL a fraction of the time only


def frames(line: str) -> tuple[list[str], int]:
    """One line of py-spy's raw (collapsed) output: its frames, root first, and count."""
    stack, _, count = line.rpartition(" ")
    # "function (file.py:123)" -> "function (file.py)": lines of one function add up
    names = [frame.rsplit(":", 1)[0] + ")" if ":" in frame else frame for frame in stack.split(";")]
    return names, int(count)


def summarise(raw: str, top: int, ticks: float) -> str:
    """Top functions by samples; ``ticks``: how many samples a busy GIL would have given."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        names, count = frames(line)
        total += count
        own[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    if not total:
        return "py-spy recorded no samples (was the worker busy?)"
    out = [
        f"{total} samples of a thread holding the GIL, of about {ticks:,.0f} "
        f"(the worker held the GIL ~{min(1.0, total / ticks):.0%} of the time)"
    ]
    for title, counter in (("inclusive", inclusive), ("self", own)):
        out += ["", f"top {top} functions, {title}:"]
        out += [f"  {n / total:6.1%}  {name}" for name, n in counter.most_common(top)]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8, help="threads of the one worker")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--durability",
        choices=DURABILITY_MODES,
        default="sync",
        help="the api's ZOSCII_DURABILITY (default sync)",
    )
    parser.add_argument(
        "--server",
        choices=("threads", "loop"),
        default="threads",
        help="the api's ZOSCII_API_SERVER (default threads)",
    )
    parser.add_argument("--data-dir", type=Path, help="parent of the api's data directory")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        print("py-spy is not installed (.venv/bin/pip install py-spy)")
        return 1
    with tempfile.TemporaryDirectory(prefix="zoscii-profile-", dir=args.data_dir) as tmp:
        work = Path(tmp)
        env = {DURABILITY: args.durability, "ZOSCII_API_SERVER": args.server}
        api = ApiServer(work / "data", workers=1, threads=args.threads, env=env).start()
        try:
            (pid,) = api.worker_pids()
            raw = work / "profile.txt"
            record = [py_spy, "record", "--gil", "--format", "raw", "--output", str(raw)]
            record += ["--rate", str(RATE)]
            duration = str(round(args.seconds) + 1)
            recorder = subprocess.Popen(
                [*record, "--pid", str(pid), "--duration", duration], stdout=subprocess.DEVNULL
            )
            time.sleep(1)  # attached before the load starts
            print(
                f"profiling worker {pid} ({args.server}, {args.threads} threads), "
                f"ZOSCII_DURABILITY={args.durability}: {load.generator()}, "
                f"{args.clients} clients, one queue, "
                f"data in {work} ({file_system_of(work) or 'file system unknown'})"
            )
            request = load.Request("POST", "/", publish_form("profile"), FORM)
            outcome = load.cycle(
                api.url.rstrip("/"),
                [request],
                connections=args.clients,
                seconds=args.seconds,
                workdir=work,
            )
            recorder.wait(timeout=args.seconds + 60)
        finally:
            api.stop()
        print(
            f"published {outcome.acked} in {outcome.seconds:.1f} s "
            f"({outcome.acked / outcome.seconds:,.0f} msg/s, {outcome.bad} bad replies), "
            f"ZOSCII_DURABILITY={args.durability}"
        )
        if recorder.returncode != 0 or not raw.exists():
            print(f"py-spy failed ({recorder.returncode}): as root, or with ptrace allowed")
            return 1
        print(summarise(raw.read_text(), args.top, RATE * (round(args.seconds) + 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
