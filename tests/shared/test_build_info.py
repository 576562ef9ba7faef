"""Every service says which version answers: ``--version`` on its command line and
``zoscii_<service>_build_info`` on its /metrics (issue 29: the api had neither, no
service had the metric)."""

from __future__ import annotations

import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import requests
from prometheus_client import CollectorRegistry, generate_latest
from zoscii_phpmq.metrics import PhpmqMetrics

from tests.support.api_app import make_client
from tests.support.api_server import ApiServer
from zoscii_claireup.metrics import ClaireupMetrics
from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.web import build_registry
from zosciimq.service import version


def _line(service: str) -> str:
    return (
        f'zoscii_{service}_build_info{{python="{platform.python_version()}",'
        f'version="{version()}"}} 1.0'
    )


def test_the_api_has_a_version_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "zoscii_api", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"zoscii-api {version()}\n")


def test_the_api_build_info_in_one_process_and_under_gunicorn(tmp_path: Path) -> None:
    single = make_client(tmp_path / "one").get("/metrics").get_data(as_text=True)
    assert _line("api") in single
    server = ApiServer(tmp_path / "many", workers=2).start()  # the multiprocess exposition
    try:
        text = requests.get(server.url + "metrics", timeout=10).text
    finally:
        server.stop()
    assert text.count(_line("api")) == 1


def test_every_other_service_exports_its_build_info() -> None:
    keeper = SnapshotKeeper(lambda: None, lambda: datetime.now(UTC))  # type: ignore[arg-type,return-value]
    registries = {
        "replikate": ReplikateMetrics().registry,
        "claireup": ClaireupMetrics(CollectorRegistry()).registry,
        "phpmq": PhpmqMetrics().registry,
        "statissa": build_registry(keeper),
    }
    for service, registry in registries.items():
        assert _line(service) in generate_latest(registry).decode(), service
