"""Every query of the Grafana dashboard answers something in a real Prometheus.

A real Prometheus (Debian's ``prometheus``, ``/usr/bin/prometheus``), configured from
``deploy/prometheus/prometheus.yml`` with the targets pointed at loopback ports and
scraping every second, scrapes the four services as processes: the api under gunicorn
(``tests/support/api_server.py``), statissa under gunicorn with the plain scan instead of
Spark (``tests/statissa/served.py``), replikate (``python -m zoscii_replikate``: one job
copying a queue of the api into another, one against a port where nothing listens, so
that it fails) and claireup (``tests/support/claireup_served.py``: its service plus one
run at start, which deletes the messages published with ``r=0``).

After publishing, fetching, consuming, acking, dead-lettering and a refresh of statissa,
each panel's queries, with the dashboard's variables expanded, are sent to
``/api/v1/query``: an error or an empty result fails the test, naming the panel and the
query (an empty result is what Grafana shows as "No data", e.g. a binary operation whose
two sides never have the same labels).

No Docker: this module replaces the e2e conftest's engine check. No prometheus binary:
SKIPPED, saying so (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import yaml

from tests.support import work_http
from tests.support.api_server import ApiServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "zoscii-mq.json"
SCRAPE_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

# What Grafana puts in place of its variables (the query inspector's view of "All").
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "${queue}": ".*",
    "$queue": ".*",
}
SETTLE_SECONDS = 40  # after the traffic: scrapes enough for rate() over 1m to have 2 samples
TIMEOUT = 30


@pytest.fixture(autouse=True)
def _require_engine() -> None:
    """Overrides tests/e2e/conftest.py's: nothing here runs in a container."""


def expand(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str
    legend: str = ""

    @property
    def legend_labels(self) -> set[str]:
        """The labels ``{{name}}`` of the legend: each series must have them, or the
        legend shows an empty name (e.g. a target label named ``job``, which Prometheus
        turns into ``exported_job``)."""
        return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", self.legend))

    def __str__(self) -> str:
        return f"panel {self.panel!r} query {self.ref}: {self.expr}"


def dashboard_queries() -> list[Query]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append(
                Query(
                    panel["title"],
                    target["refId"],
                    expand(target["expr"]),
                    target.get("legendFormat", ""),
                )
            )
    return queries


def template_metrics() -> list[str]:
    """The metric of each ``label_values(metric, label)`` variable query."""
    dashboard = json.loads(DASHBOARD.read_text())
    metrics = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            definition = variable["definition"]
            assert definition.startswith("label_values("), definition
            metrics.append(definition[len("label_values(") :].split(",")[0].strip())
    return metrics


def test_the_queries_expand_completely() -> None:
    """Without a Prometheus: no dashboard variable is left unexpanded ("${1}" is
    label_replace's, not Grafana's)."""
    queries = dashboard_queries()
    assert len(queries) >= 30
    for query in queries:
        assert "$" not in query.expr.replace("${1}", ""), str(query)


def test_no_query_relies_on_a_renamed_label() -> None:
    """A target's own ``job`` or ``instance`` label clashes with Prometheus' and comes
    out as ``exported_job``/``exported_instance``: the services must not use those
    names, so the dashboard never needs the renamed ones."""
    for query in dashboard_queries():
        assert "exported_" not in query.expr + query.legend, str(query)


# ---- the processes ----------------------------------------------------------------


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return f"--- {self.name} ---\n{self.log.read_text(errors='replace')[-3000:]}"


@dataclass
class Processes:
    tmp: Path
    started: list[Process] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Process:
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = Process(name, popen, log)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            if process.popen.poll() is None:
                os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait()

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.started)


def service_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOSCII_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(ZOSCII_DATA_DIR=str(data_dir), ZOSCII_LOG_LEVEL="INFO", **extra)
    return env


def prometheus_config(targets: dict[str, str]) -> dict:
    """deploy/prometheus/prometheus.yml with loopback targets and a scrape a second."""
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(targets), sorted(jobs)
    for name, job in jobs.items():
        job.pop("scrape_interval", None)
        job.pop("scrape_timeout", None)
        job["static_configs"] = [{"targets": [targets[name]]}]
    return config


def wait_until(what: str, condition, processes: Processes, seconds: float = TIMEOUT) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {seconds} s\n{processes.logs()}", pytrace=False)
        time.sleep(0.2)


def metric_value(url: str, name: str) -> float:
    """Sum of a metric's samples on a /metrics page (0 when absent)."""
    text = requests.get(url, timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass(frozen=True)
class Stack:
    prometheus: str
    processes: Processes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip(
            f"no prometheus binary ({PROMETHEUS}): apt-get install prometheus (.ci/run does)"
        )
    tmp = tmp_path_factory.mktemp("dashboard")
    data_dir = tmp / "data"
    data_dir.mkdir()
    processes = Processes(tmp)
    api = ApiServer(data_dir, workers=2, threads=4)
    ports = {name: free_port() for name in ("prometheus", "statissa", "replikate", "claireup")}
    loopback = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            prometheus_config(
                {
                    "zoscii-api": f"127.0.0.1:{api.port}",
                    "zoscii-statissa": loopback["statissa"],
                    "zoscii-replikate": loopback["replikate"],
                    "zoscii-claireup": loopback["claireup"],
                }
            )
        )
    )
    prometheus_url = f"http://{loopback['prometheus']}"
    try:
        processes.start(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address={loopback['prometheus']}",
                "--log.level=warn",
            ],
            dict(os.environ),
        )
        api.start()
        processes.started.append(Process("api", api.process, api.log_path))
        traffic(api.url)

        jobs = tmp / "replikate.toml"
        jobs.write_text(
            "[defaults]\n"
            "interval_seconds = 1\n"
            "backoff_initial_seconds = 1.0\n"
            "backoff_max_seconds = 2.0\n"
            "connect_timeout = 1.0\n"
            "retries = 0\n\n"
            "[jobs.copy]\n"
            f'source_url = "{api.url}index.php"\n'
            'source_queue = "orders"\n'
            'target_queue = "orders_copy"\n\n'
            "[jobs.broken]\n"
            f'source_url = "http://127.0.0.1:{free_port()}/index.php"\n'
            'source_queue = "orders"\n'
            'target_queue = "never"\n'
        )
        processes.start(
            "replikate",
            [sys.executable, "-m", "zoscii_replikate"],
            service_env(
                data_dir,
                ZOSCII_REPLIKATE_CONFIG=str(jobs),
                ZOSCII_REPLIKATE_METRICS_HOST="127.0.0.1",
                ZOSCII_REPLIKATE_METRICS_PORT=str(ports["replikate"]),
            ),
        )
        processes.start(
            "claireup",
            [sys.executable, "-m", "tests.support.claireup_served"],
            service_env(
                data_dir,
                ZOSCII_CLAIREUP_HOST="127.0.0.1",
                ZOSCII_CLAIREUP_PORT=str(ports["claireup"]),
            ),
        )
        statissa = f"http://{loopback['statissa']}"
        processes.start(
            "statissa",
            [sys.executable, "-m", "tests.statissa.served"],
            service_env(
                data_dir,
                ZOSCII_STATISSA_HOST="127.0.0.1",
                ZOSCII_STATISSA_PORT=str(ports["statissa"]),
                ZOSCII_STATISSA_INTERVAL_SECONDS="3600",
                ZOSCII_STATISSA_THREADS="2",
            ),
        )
        replikate_metrics = f"http://{loopback['replikate']}/metrics"
        claireup_metrics = f"http://{loopback['claireup']}/metrics"
        wait_until(
            "replikate copied orders and failed the broken job",
            lambda: (
                metric_value(replikate_metrics, "zoscii_replikate_messages_total") >= 6
                and metric_value(replikate_metrics, "zoscii_replikate_errors_total") >= 1
            ),
            processes,
        )
        wait_until(
            "claireup ran and deleted the messages published with r=0",
            lambda: metric_value(claireup_metrics, "zoscii_claireup_deleted_files_total") >= 3,
            processes,
        )
        wait_until(
            "statissa answers",
            lambda: requests.get(f"{statissa}/healthz", timeout=5).status_code == 200,
            processes,
        )
        # Figures of everything above: the copy, the pointers, the group, the deletions.
        refreshed = requests.post(f"{statissa}/refresh", timeout=TIMEOUT)
        assert refreshed.status_code == 200, refreshed.text
        wait_until(
            "prometheus is ready",
            lambda: requests.get(f"{prometheus_url}/-/ready", timeout=5).status_code == 200,
            processes,
        )
        yield Stack(prometheus_url, processes)
    finally:
        processes.stop_all()
        api.kill()


def traffic(base: str) -> None:
    """What makes every panel's series exist: publishes, fetches, a store, a bad request,
    a consumer group with an ack, a dead letter and leases outstanding."""
    http = requests.Session()
    url = base + "index.php"

    def ok(reply: requests.Response) -> dict:
        assert reply.status_code == 200, reply.text[:300]
        return reply.json() if "json" in reply.headers.get("Content-Type", "") else {}

    for number in range(6):
        ok(http.post(url, data={"action": "publish", "q": "orders", "msg": f"order {number}"}))
    for number in range(3):  # retention 0 days: due for deletion at claireup's next run
        ok(
            http.post(
                url, data={"action": "publish", "q": "expiring", "r": "0", "msg": f"e{number}"}
            )
        )
    ok(http.post(url, data={"action": "store", "msg": "kept in the store"}))
    ok(http.get(url, params={"action": "fetch", "q": "orders"}))
    bad = http.get(url, params={"action": "fetch", "q": "not a queue!"})
    assert 400 <= bad.status_code < 500, bad.status_code
    leased = work_http.consume(http, url, "orders", "workers", count=4, lease=300)
    assert len(leased) == 4, leased
    results = work_http.ack(http, url, "orders", "workers", [leased[0].receipt])
    assert [r.result for r in results] == ["ok"], results
    dead = http.post(
        url,
        data={
            "action": "deadletter",
            "q": "orders",
            "group": "workers",
            "receipt": leased[1].receipt,
        },
    )
    assert dead.status_code == 200, dead.text[:300]


# ---- the test ---------------------------------------------------------------------


def query(prometheus: str, expr: str) -> tuple[str, list]:
    """("", result) or (the error, [])."""
    reply = requests.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=TIMEOUT)
    document = reply.json()
    if document.get("status") != "success":
        return f"{document.get('errorType')}: {document.get('error')}", []
    return "", document["data"]["result"]


def evaluate(stack: Stack) -> tuple[list[str], list[str]]:
    """(errors, empty): one line per query of the dashboard that fails or is empty."""
    errors, empty = [], []
    for item in dashboard_queries():
        error, result = query(stack.prometheus, item.expr)
        if error:
            errors.append(f"{item}\n    -> {error}")
        elif not result:
            empty.append(str(item))
        else:
            for series in result:
                missing = item.legend_labels - set(series["metric"])
                if missing:
                    errors.append(
                        f"{item}\n    -> no label {sorted(missing)} in {series['metric']}"
                    )
    for metric in template_metrics():
        reply = requests.get(
            f"{stack.prometheus}/api/v1/series", params={"match[]": metric}, timeout=TIMEOUT
        ).json()
        if not reply.get("data"):
            empty.append(f"template variable: label_values({metric}, ...)")
    return errors, empty


def test_every_dashboard_query_answers(stack: Stack) -> None:
    # Until every query answers: rate() needs two scrapes of a series in its window,
    # statissa's figures the scrape after the refresh.
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        errors, empty = evaluate(stack)
        if errors:
            pytest.fail(
                "queries refused, or series without their legend labels:\n" + "\n".join(errors),
                pytrace=False,
            )
        if not empty or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not empty, (
        f"dashboard queries with no result after {SETTLE_SECONDS} s of scrapes:\n"
        + "\n".join(empty)
        + "\n\ntargets: "
        + json.dumps(
            [
                (t["labels"]["job"], t["health"], t["lastError"])
                for t in requests.get(f"{stack.prometheus}/api/v1/targets", timeout=TIMEOUT).json()[
                    "data"
                ]["activeTargets"]
            ]
        )
    )
