"""The servers a comparison runs against: ours, the floors and the original.

*ours* is the api as the other scenarios start it, once per durability mode compared
(``ZOSCII_DURABILITY`` in its environment, each on a data directory of its own). The
*floors* are ``bench/floor_app.py``'s two apps, the Flask one and the raw WSGI one,
under gunicorn with the api's settings (workers, threads, keepalive, timeout, access
log, HTTP parser, and the worker class: gthread with the api's keep-alive linger and
head deadline), read from ``services/api/gunicorn.conf.py`` so they stay alike: a floor
is what the same server costs for an app that does nothing. For publishing, the *core
commit* beside them (``publish_app``: the api's commit without the endpoint, on a data
directory of its own). The *original* runs when
``ZOSCII_BENCH_ORIGINAL`` is set and nginx and php-fpm are installed; otherwise
``missing`` says why not.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import REPO
from bench.context import Context
from bench.original import OriginalServer, unavailable
from bench.report import RAW_FLOOR
from bench.servers import Api
from tests.support.api_server import GUNICORN_CONF, free_port, until_healthy

log = logging.getLogger(__name__)

SHARED_SETTINGS = (
    "keepalive",
    "timeout",
    "graceful_timeout",
    "access_log_format",
    "http_parser",
    "asgi_loop",
)

DURABILITY = "ZOSCII_DURABILITY"
SERVER = "ZOSCII_API_SERVER"

# The api's targets: name -> its settings (durability mode, server).
OURS = "ours"
SYNC, INTERVAL = "ours sync", "ours interval"
LOOP_SYNC, LOOP_INTERVAL = "ours loop sync", "ours loop interval"
ONE_MODE = {OURS: {DURABILITY: "sync"}}  # where durability plays no part (a fetch)
BOTH_MODES = {SYNC: {DURABILITY: "sync"}, INTERVAL: {DURABILITY: "interval"}}
# Both modes under both servers: the gthread worker and the asgi worker (zoscii_api.asgi).
EVERY_SERVER = {
    **BOTH_MODES,
    LOOP_SYNC: {DURABILITY: "sync", SERVER: "loop"},
    LOOP_INTERVAL: {DURABILITY: "interval", SERVER: "loop"},
}

FLASK_FLOOR = "Flask floor"
RAW_ASGI_FLOOR = "raw ASGI floor"
RAW_ASGI_APP = "bench.floor_app:raw_asgi_app"
# The raw ASGI app runs under gunicorn's asgi worker, as ``ZOSCII_API_SERVER=loop`` does:
# the least the loop server can do per request.
FLOOR_APPS = {
    RAW_FLOOR: "bench.floor_app:raw_app",
    RAW_ASGI_FLOOR: RAW_ASGI_APP,
    FLASK_FLOOR: "bench.floor_app:app",
}
# Publishing only: the core's commit under the same server, without the endpoint; and
# the same commit on an event loop (gunicorn's asgi worker), its requests gathered.
CORE_FLOOR = "core commit"
CORE_APP = "bench.floor_app:publish_app"
CORE_LOOP_FLOOR = "core commit, event loop"
CORE_LOOP_APP = "bench.floor_app:publish_loop_app"
# target -> (app, ZOSCII_DURABILITY): the loop in both modes, as ours
CORE_APPS = {
    CORE_FLOOR: (CORE_APP, "sync"),
    CORE_LOOP_FLOOR: (CORE_LOOP_APP, "sync"),
    f"{CORE_LOOP_FLOOR}, interval": (CORE_LOOP_APP, "interval"),
}
ASGI_WORKER = "asgi"  # gunicorn's own (gunicorn.workers.gasgi), with its C parser


def api_gunicorn_settings(scratch: Path) -> dict[str, object]:
    """The api's gunicorn settings, by running its config file in a throwaway process.

    The config file makes a metrics directory as it loads: ``scratch`` gets it.
    """
    code = (
        "import json, runpy, sys; ns = runpy.run_path(sys.argv[1]); "
        "print(json.dumps({k: ns.get(k) for k in sys.argv[2:]}))"
    )
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
    }
    out = subprocess.run(
        [sys.executable, "-c", code, str(GUNICORN_CONF), *SHARED_SETTINGS, "worker_class"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return json.loads(out)


class FloorServer:
    """A WSGI app of ``bench.floor_app`` (``app``: module:callable) under gunicorn with the
    api's settings and worker class (or an ASGI app under ``worker_class`` asgi)."""

    def __init__(
        self,
        workdir: Path,
        *,
        workers: int,
        threads: int,
        app: str = FLOOR_APPS[FLASK_FLOOR],
        env: dict[str, str] | None = None,
        worker_class: str | None = None,
    ) -> None:
        self.workdir, self.workers, self.threads, self.app = workdir, workers, threads, app
        self.worker_class = worker_class
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.process: subprocess.Popen[bytes] | None = None
        self.settings: dict[str, object] = {}

    def start(self, timeout: float = 30.0) -> FloorServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.settings = api_gunicorn_settings(self.workdir)
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            f"--worker-class={self.worker_class or self.settings['worker_class']}",
            f"--workers={self.workers}",
            *([] if self.worker_class == ASGI_WORKER else [f"--threads={self.threads}"]),
            f"--keep-alive={self.settings['keepalive']}",
            f"--timeout={self.settings['timeout']}",
            f"--graceful-timeout={self.settings['graceful_timeout']}",
            f"--bind=127.0.0.1:{self.port}",
            "--access-logfile=-",  # as the api: one line per request to stdout
            f"--access-logformat={self.settings['access_log_format']}",
            f"--http-parser={self.settings['http_parser']}",
            f"--asgi-loop={self.settings['asgi_loop']}",  # ignored by the WSGI floors
            f"--chdir={REPO}",
            self.app,
        ]
        with open(self.workdir / "floor.log", "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
            )
        if until_healthy(self.url, timeout, self.process):
            return self
        self.stop()
        log_text = (self.workdir / "floor.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"floor app did not start:\n{log_text}")

    def cpu_roots(self) -> list[int]:
        return [self.process.pid] if self.process and self.process.poll() is None else []

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def api_cpu_roots(api: Api) -> list[int]:
    """The gunicorn master when we started it, else (a container) its workers."""
    process = getattr(api, "process", None)
    if process is None:
        return api.worker_pids()
    if process.poll() is not None:
        log_tail = api.log() if hasattr(api, "log") else ""
        raise RuntimeError(f"the api exited with {process.returncode}:\n{log_tail}")
    return [process.pid]


@dataclass
class Contenders:
    ours: dict[str, Api]  # target name -> the api in that durability mode
    ours_dirs: dict[str, Path]  # target name -> its data directory
    floors: dict[str, FloorServer]  # target name -> the floor app's server
    floor_dirs: dict[str, Path]  # target name -> the data directory of a floor that has one
    original: OriginalServer | None
    missing: str  # why there is no original, or ""


@contextmanager
def contenders(
    ctx: Context,
    workdir: Path,
    *,
    ours: dict[str, dict[str, str]] = ONE_MODE,
    original: bool = True,
    core: bool = False,
) -> Iterator[Contenders]:
    """Start ours (one api per entry of ``ours``: target name -> its settings), both
    floors, with ``core`` the core commit (sync under the api's worker; sync and interval
    on an event loop) and (when possible) the original; stop them all at the end."""
    with ExitStack() as stack:
        apis, dirs = {}, {}
        for target, settings in ours.items():
            dirs[target] = workdir / target.replace(" ", "-").replace(",", "")
            dirs[target].mkdir(parents=True)
            apis[target] = stack.enter_context(ctx.api(dirs[target], settings))
        floors, floor_dirs = {}, {}
        apps = {t: (app, "") for t, app in FLOOR_APPS.items()}
        if core:
            apps.update(CORE_APPS)
        for target, (app, mode) in apps.items():
            where = workdir / target.replace(" ", "-").replace(",", "")
            env = None
            if mode:  # a core commit: a data directory of its own
                floor_dirs[target] = where / "data"
                env = {"ZOSCII_DATA_DIR": str(where / "data"), DURABILITY: mode}
            floor = FloorServer(
                where,
                workers=ctx.workers,
                threads=ctx.threads,
                app=app,
                env=env,
                worker_class=ASGI_WORKER if app in (CORE_LOOP_APP, RAW_ASGI_APP) else None,
            )
            floors[target] = floor.start()
            stack.callback(floor.stop)
        server, missing = None, (unavailable() or "") if original else "not compared"
        if not missing:
            server = OriginalServer(workdir / "original").start()
            stack.callback(server.stop)
            log.info("original on %s; configured: %s", server.url, server.configured())
            ctx.results.header["original configured"] = server.configured()
        yield Contenders(apis, dirs, floors, floor_dirs, server, missing)
