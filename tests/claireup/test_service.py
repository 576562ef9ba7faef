"""Settings, schedule, metrics and the ops port of the long-running service."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from prometheus_client import CollectorRegistry

from tests.support.message_files import write_queue_message, write_store_message
from zoscii_claireup.metrics import ClaireupMetrics
from zoscii_claireup.service import JOB_ID, Service
from zoscii_claireup.settings import Settings, cron_trigger
from zosciimq.settings import SettingsError


def get(url: str, method: str = "GET") -> tuple[int, str]:
    try:
        request = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# --- settings ----------------------------------------------------------------------------
def test_defaults():
    settings = Settings.from_env({})
    assert settings.schedule == "0 0 * * *"
    assert settings.temp_max_age_seconds == 86_400
    assert settings.port == 9102
    assert settings.data_dir == Path("/data")
    assert not settings.dry_run


def test_environment_and_flags():
    settings = Settings.from_env(
        {
            "ZOSCII_DATA_DIR": "/srv/zoscii",
            "ZOSCII_CLAIREUP_SCHEDULE": "30 3 * * 1",
            "ZOSCII_CLAIREUP_TEMP_MAX_AGE_SECONDS": "7200",
            "ZOSCII_NONCE_WINDOW_SECONDS": "300",
            "ZOSCII_CLAIREUP_DRY_RUN": "yes",
        }
    )
    assert settings.schedule == "30 3 * * 1"
    assert settings.temp_max_age_seconds == 7200
    assert settings.core.nonce_window_seconds == 300
    assert settings.dry_run
    changed = settings.with_overrides(schedule="*/5 * * * *", data_dir=Path("/elsewhere"))
    assert changed.schedule == "*/5 * * * *" and changed.data_dir == Path("/elsewhere")
    with pytest.raises(SettingsError, match="cron"):
        settings.with_overrides(schedule="every night")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ZOSCII_CLAIREUP_SCHEDULE", "0 0 * *"),
        ("ZOSCII_CLAIREUP_TEMP_MAX_AGE_SECONDS", "10"),  # shorter than a slow upload
        ("ZOSCII_CLAIREUP_PORT", "70000"),
        ("ZOSCII_CLAIREUP_DRY_RUN", "maybe"),
        ("ZOSCII_LOG_LEVEL", "loud"),
    ],
)
def test_bad_values_name_their_variable(variable, value):
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


def test_the_schedule_is_midnight_utc_whatever_the_local_zone():
    trigger = cron_trigger("0 0 * * *")
    afternoon_in_auckland = datetime(2024, 5, 1, 13, 0, tzinfo=ZoneInfo("Pacific/Auckland"))
    next_fire = trigger.get_next_fire_time(None, afternoon_in_auckland)
    assert next_fire == datetime(2024, 5, 2, 0, 0, tzinfo=UTC)


# --- metrics -----------------------------------------------------------------------------
def test_a_run_is_recorded_per_area_and_queue(data_dir, make_cleaner, clock):
    registry = CollectorRegistry()
    metrics = ClaireupMetrics(registry)
    for _ in range(3):
        write_queue_message(data_dir, "orders", clock.now - timedelta(days=2), 1, b"abcd")
    write_queue_message(data_dir, "orders", clock.now, 1)
    write_store_message(data_dir, clock.now - timedelta(days=2), 1, b"abcdefgh")
    (data_dir.queue_dir("orders") / "junk").write_bytes(b"")

    def deleted(what: str, area: str, queue: str = "") -> float | None:
        return sample(registry, f"zoscii_claireup_deleted_{what}_total", area=area, queue=queue)

    dry = make_cleaner(dry_run_sink=None).run(dry_run=True)
    metrics.record(dry)
    assert deleted("files", "queue", "orders") is None  # a dry run deletes nothing
    assert sample(registry, "zoscii_claireup_last_success_timestamp_seconds") == 0.0

    clock.advance(seconds=5)
    report = make_cleaner().run()
    metrics.record(report)

    assert deleted("files", "queue", "orders") == 3
    assert deleted("bytes", "queue", "orders") == 12
    assert deleted("files", "store") == 1
    assert deleted("bytes", "store") == 8
    assert sample(registry, "zoscii_claireup_unparsable_files", area="queue") == 1
    assert sample(registry, "zoscii_claireup_unparsable_files", area="store") == 0
    assert sample(registry, "zoscii_claireup_runs_total", outcome="success") == 2
    assert sample(registry, "zoscii_claireup_scanned_files_total", area="queue") == 5 + 5
    assert sample(registry, "zoscii_claireup_last_success_timestamp_seconds") == (
        clock.now.timestamp()
    )
    assert sample(registry, "zoscii_claireup_last_run_duration_seconds") >= 0
    # the gauge starts at 0 as well: only the run's own duration tells it was recorded
    assert sample(registry, "zoscii_claireup_last_run_duration_seconds") == (
        report.duration_seconds
    )
    assert report.duration_seconds > 0


# --- the ops port ------------------------------------------------------------------------
def wait_until_serving(service: Service, serving: threading.Thread) -> None:
    """Until the service's port is open and its scheduler runs (30 s at most)."""
    deadline = time.monotonic() + 30
    while service.server is None or not service.scheduler.running:
        assert serving.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.01)


@pytest.fixture
def service(tmp_path: Path):
    """The service on a free port, serving until the test ends (no run is due meanwhile)."""
    settings = Settings.from_env({"ZOSCII_DATA_DIR": str(tmp_path / "not-mounted")})
    stop = threading.Event()
    service = Service(dataclasses.replace(settings, host="127.0.0.1", port=0), stop)
    serving = threading.Thread(target=service.serve)
    serving.start()
    try:
        wait_until_serving(service, serving)
        yield service
    finally:
        stop.set()
        serving.join(timeout=20)


def test_healthz_is_json_503_with_a_reason_when_the_data_dir_is_unusable(service):
    url = f"http://127.0.0.1:{service.server.port}/healthz"
    shutil.rmtree(service.data_dir.root)  # serve() created it; the volume went away
    status, body = get(url)
    assert status == 503
    assert json.loads(body) == {
        "status": "unavailable",
        "reason": f"data directory {service.data_dir.root} does not exist",
    }
    service.data_dir.ensure()
    status, body = get(url)
    assert (status, json.loads(body)) == (200, {"status": "ok"})


def test_the_ops_port_is_read_only(service):
    base = f"http://127.0.0.1:{service.server.port}"
    assert get(f"{base}/healthz", method="POST")[0] == 405
    assert get(f"{base}/metrics", method="DELETE")[0] == 405
    assert get(f"{base}/nothing")[0] == 404


# --- the service ------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_the_scheduler_runs_the_cleaner_and_the_metrics_show_it(data_dir):
    overdue = write_queue_message(data_dir, "q", datetime.now(UTC) - timedelta(days=2), 1)
    settings = Settings.from_env({}).with_overrides(data_dir=data_dir.root)
    settings = dataclasses.replace(settings, host="127.0.0.1", port=0)
    stop = threading.Event()
    service = Service(settings, stop)
    serving = threading.Thread(target=service.serve)
    serving.start()
    try:
        wait_until_serving(service, serving)
        job = service.scheduler.get_job(JOB_ID)
        assert job.next_run_time.astimezone(UTC).time() == datetime.min.time()
        service.scheduler.modify_job(JOB_ID, next_run_time=datetime.now(UTC))  # "it's midnight"
        metric = 'zoscii_claireup_runs_total{outcome="success"} 1.0'
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, body = get(f"http://127.0.0.1:{service.server.port}/metrics")
            if metric in body:
                break
            time.sleep(0.05)
        assert metric in body
        assert 'zoscii_claireup_deleted_files_total{area="queue",queue="q"} 1.0' in body
        assert not overdue.exists()
    finally:
        stop.set()
        serving.join(timeout=20)
    assert not serving.is_alive()
