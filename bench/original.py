"""The original PHP implementation under nginx + php-fpm, started by the bench itself.

Only a directory given at run time in ``ZOSCII_BENCH_ORIGINAL`` is used (the ``zosciimq/``
folder of github.com/PrimalNinja/cyborgzoscii); nothing of it lives in this repository.
It is copied into the run's temp directory and configured there, and the changes are
logged. nginx and php-fpm get configs written next to it, on loopback ports.

The reference deployment is the original's own: its ``docker/nginx.conf`` server block
(with the listen address, root and FastCGI address of this run) and the php:8.2-fpm
image's pool defaults. Only what a loopback run needs differs: ports, paths, and root
as the user when the bench runs as root.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.support.api_server import free_port

log = logging.getLogger(__name__)

ENV = "ZOSCII_BENCH_ORIGINAL"
POOL = {  # php:8.2-fpm image defaults (www.conf)
    "pm": "dynamic",
    "pm.max_children": 5,
    "pm.start_servers": 2,
    "pm.min_spare_servers": 1,
    "pm.max_spare_servers": 3,
}
REFERENCE = (
    "nginx: the original's docker/nginx.conf server block, worker_processes auto; "
    "php-fpm: php:8.2-fpm pool defaults "
    + ", ".join(f"{key} = {value}" for key, value in POOL.items())
)

NGINX_CONF = """\
daemon off;
worker_processes auto;
{user}
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    include {conf_dir}/mime.types;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 65;
    access_log {dir}/nginx-access.log;
    client_body_temp_path {dir}/client_body;
    fastcgi_temp_path {dir}/fastcgi;
    proxy_temp_path {dir}/proxy;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    # The original's docker/nginx.conf, with this run's listen address, root and FastCGI.
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        root {root};
        index index.php;
        client_max_body_size 10M;
        location / {{
            try_files $uri $uri/ =404;
        }}
        location ~ \\.php$ {{
            try_files $uri =404;
            fastcgi_pass 127.0.0.1:{fpm_port};
            fastcgi_index index.php;
            include {conf_dir}/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_param PATH_INFO $fastcgi_path_info;
        }}
    }}
}}
"""

FPM_CONF = """\
[global]
pid = {dir}/php-fpm.pid
error_log = {dir}/php-fpm.log
daemonize = no

[www]
{user}
listen = 127.0.0.1:{fpm_port}
{pool}
access.log = {dir}/php-fpm-access.log
clear_env = no
catch_workers_output = yes
"""


def _nginx() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
    )


def _php_fpm() -> str | None:
    found = shutil.which("php-fpm")
    if found:
        return found
    candidates = sorted(Path("/usr/sbin").glob("php-fpm*"), reverse=True)
    return str(candidates[0]) if candidates else None


def unavailable(*, needs_curl: bool = False) -> str | None:
    """Why the original cannot be served here, or None."""
    source = os.environ.get(ENV, "")
    if not source:
        return f"{ENV} is not set"
    if not Path(source, "index.php").is_file():
        return f"{ENV}={source} has no index.php"
    if _nginx() is None:
        return "nginx is not installed (apt-get install nginx)"
    fpm = _php_fpm()
    if fpm is None:
        return "php-fpm is not installed (apt-get install php-fpm)"
    if needs_curl:
        modules = subprocess.run([fpm, "-m"], capture_output=True, text=True).stdout.split()
        if "curl" not in modules:
            return "php-fpm has no curl, which replikate.php needs (apt-get install php-curl)"
    return None


def versions() -> str:
    """nginx and php-fpm versions, for the header."""
    nginx, fpm = _nginx(), _php_fpm()
    if not nginx or not fpm:
        return "not installed"
    nginx_v = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip()
    fpm_v = subprocess.run([fpm, "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    opcache = "Zend OPcache" in subprocess.run([fpm, "-m"], capture_output=True, text=True).stdout
    return (
        f"{nginx_v.split(': ')[-1]}, {fpm_v.split(' (')[0]}, opcache {'on' if opcache else 'off'}"
    )


def describe() -> str:
    """The header line: where the original comes from and how it is served, or why not."""
    why = unavailable()
    if why:
        return f"not available: {why}"
    return f"{os.environ[ENV]} under {versions()}; {REFERENCE}"


def configure(www: Path, url: str) -> list[str]:
    """Set the copy's configuration for this run; what was changed, one line each."""
    changes: list[str] = []
    index = www / "index.php"
    text = index.read_text()
    allowed = re.findall(r"define\('(ALLOW_\w+)',\s*'FALSE'\)", text)
    text = re.sub(r"define\('(ALLOW_\w+)',\s*'FALSE'\)", r"define('\1', 'TRUE')", text)
    index.write_text(text)
    changes += [f"index.php: {name} 'FALSE' -> 'TRUE'" for name in allowed]
    constants = www / "inc-constants.php"
    text = constants.read_text()
    text, count = re.subn(
        r"define\('FOLDER_PERMISSIONS',\s*755\)", "define('FOLDER_PERMISSIONS', 0755)", text
    )
    if count:
        changes.append("inc-constants.php: FOLDER_PERMISSIONS 755 -> 0755")
    text, count = re.subn(
        r"define\('LOCAL_URL',\s*'[^']*'\)", lambda _m: f"define('LOCAL_URL', '{url}')", text
    )
    if count:
        changes.append(f"inc-constants.php: LOCAL_URL -> {url}")
    constants.write_text(text)
    return changes


class OriginalServer:
    """One copy of the original, served by its own nginx and php-fpm on loopback."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.www = workdir / "www"
        self.port, self.fpm_port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.port}/"
        self.url = self.base + "index.php"  # LOCAL_URL and the clients' endpoint
        self.changes: list[str] = []
        self._processes: list[subprocess.Popen[bytes]] = []

    def start(self, timeout: float = 20.0) -> OriginalServer:
        nginx, fpm = _nginx(), _php_fpm()
        assert nginx and fpm, "check unavailable() first"
        self.dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(os.environ[ENV], self.www, ignore=shutil.ignore_patterns(".git"))
        self.changes = configure(self.www, self.url)
        root = os.geteuid() == 0
        conf_dir = Path(
            re.search(r"--conf-path=(\S+)", _run_v(nginx)).group(1)  # type: ignore[union-attr]
        ).parent
        values = {"dir": self.dir, "port": self.port, "fpm_port": self.fpm_port}
        (self.dir / "nginx.conf").write_text(
            NGINX_CONF.format(
                **values,
                root=self.www,
                conf_dir=conf_dir,
                user="user root;" if root else "",  # workers must read the 0700 temp dir
            )
        )
        (self.dir / "php-fpm.conf").write_text(
            FPM_CONF.format(
                **values,
                user="user = root\ngroup = root" if root else "",
                pool="\n".join(f"{key} = {value}" for key, value in POOL.items()),
            )
        )
        fpm_command = [fpm, "-y", str(self.dir / "php-fpm.conf"), *(["-R"] if root else [])]
        nginx_command = [
            nginx,
            "-c",
            str(self.dir / "nginx.conf"),
            "-p",
            str(self.dir),
            "-e",
            str(self.dir / "nginx-error.log"),
        ]
        for command in (fpm_command, nginx_command):
            with open(self.dir / "stdout.log", "ab") as out:
                self._processes.append(
                    subprocess.Popen(
                        command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url, timeout=2) as reply:
                    if b"ZOSCII" in reply.read():
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"original did not answer on {self.url}: {self.logs()}")

    def configured(self) -> str:
        """What was changed in the copy, the same for every server of a run."""
        return "; ".join(self.changes).replace(self.url, "<its own index.php URL>")

    def queue_dir(self, queue: str) -> Path:
        return self.www / "queues" / queue

    def cpu_roots(self) -> list[int]:
        """php-fpm master and nginx master: their trees are the server."""
        return [process.pid for process in self._processes if process.poll() is None]

    def logs(self) -> str:
        parts = []
        for name in ("stdout.log", "nginx-error.log", "php-fpm.log"):
            path = self.dir / name
            if path.exists():
                parts.append(f"{name}: {path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        self._processes.clear()


def _run_v(nginx: str) -> str:
    return subprocess.run([nginx, "-V"], capture_output=True, text=True).stderr
