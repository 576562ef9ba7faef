"""statissa on a real Spark standalone cluster (deploy/compose.spark.yml, issue 18).

A master and two workers, run as the override file defines them (command, environment,
read-only root, tmpfs, dropped capabilities, health checks), share one network and one
data volume with statissa; the workers mount it read-only. Messages are written into
several queues in the on-disk format with the core (``MessageName``), from inside the
statissa container. Then statissa computes on the cluster (``POST /refresh``) and the
figures must equal those of a ``local[*]`` run (``--once``) over the same files, and
the Spark application's REST API must show that the tasks ran in executors on both
workers (in standalone mode the driver runs none).

Name times sit half an hour off every boundary statissa measures against (hour buckets,
expiry at "now" and "now + 24 h"), so the two runs, a minute apart, agree exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml
from testcontainers.core.container import DockerContainer

from tests.e2e.compose_spec import REPO_ROOT, interpolate
from tests.e2e.stack import HEALTH_PROBE_INTERVAL, RUN_LABEL, Stack, network, wait_healthy
from tests.support.e2e_run import E2E, image_tag_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SPARK_FILE = REPO_ROOT / "deploy" / "compose.spark.yml"
WORKERS = ("spark-worker-1", "spark-worker-2")
QUEUES = {"orders": 120, "audit": 90, "mail": 60, "empty_soon": 30}  # 300 messages
# Small executors: the machine running the tests is shared.
CLUSTER_ENV = {
    "ZOSCII_SPARK_WORKER_CORES": "1",
    "ZOSCII_SPARK_WORKER_MEMORY": "1g",
    "ZOSCII_SPARK_EXECUTOR_MEMORY": "512m",
}
# The driver's UI is off in statissa; the test turns it on for its REST API (in the
# container only: port 4040 is not published).
TEST_CONF = "spark.ui.enabled=true,spark.ui.port=4040"

WRITE_MESSAGES = """
import json, os, sys
from datetime import UTC, datetime, timedelta
from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName, format_stamp

queues = json.loads(sys.argv[1])
data = DataDir("/data")
data.ensure()
now = datetime.now(UTC).replace(microsecond=0)
for q, (queue, count) in enumerate(sorted(queues.items())):
    directory = data.queue_dir(queue)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        # k hours and 30 minutes ago: 30 minutes from every hour and expiry boundary
        at = now - timedelta(hours=(i * 7) % 60, minutes=30)
        name = MessageName(stamp=format_stamp(at), counter=i, retention_days=i % 4,
                           guid=f"00000000-0000-4000-8000-{q:06d}{i:06d}")
        with open(directory / str(name), "wb") as out:
            out.write(b"x" * (i % 50))
    (directory / "not-a-message-name.bin").write_bytes(b"?")  # unrecognised
print(sum(queues.values()))
"""

# GET or POST (a second argument: the body) from inside the statissa container: the
# tests need not reach the published ports (bound to 127.0.0.1 of the Docker host).
GET = """
import sys, urllib.error, urllib.request
body = sys.argv[2].encode() if len(sys.argv) > 2 else None
try:
    with urllib.request.urlopen(sys.argv[1], data=body, timeout=280) as answer:
        print(answer.read().decode())
except urllib.error.HTTPError as error:
    sys.exit(f"{error}: {error.read().decode()[:2000]}")
"""

FETCH_EXECUTORS = """
import json, urllib.request
def get(path):
    with urllib.request.urlopen("http://127.0.0.1:4040/api/v1" + path, timeout=10) as r:
        return json.load(r)
app = get("/applications")[0]["id"]
print(json.dumps({"app": app, "executors": get(f"/applications/{app}/allexecutors")}))
"""


def spark_services(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The override's services, YAML anchors resolved, variables interpolated."""
    document = yaml.safe_load(SPARK_FILE.read_text(encoding="utf-8"))

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            return interpolate(value, env)
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    return {name: resolve(spec) for name, spec in document["services"].items()}


def healthcheck(spec: Mapping[str, Any]) -> dict[str, Any]:
    check = spec["healthcheck"]
    return {
        "test": list(check["test"]),
        "interval": int(HEALTH_PROBE_INTERVAL * 1e9),
        "timeout": int(float(str(check["timeout"]).rstrip("s")) * 1e9),
        "retries": int(check["retries"]),
        "start_period": int(float(str(check["start_period"]).rstrip("s")) * 1e9),
    }


def start_spark_service(stack: Stack, name: str, spec: Mapping[str, Any]) -> DockerContainer:
    """One service of compose.spark.yml on the stack's network, under its service name,
    with the stack's volume at /data read-only for the workers (compose: volumes_from
    statissa:ro); its published ports are left out (the test reads them inside)."""
    environment = {k: str(v) for k, v in (spec.get("environment") or {}).items() if v is not None}
    container = DockerContainer(
        spec["image"],
        command=list(spec["command"]),
        env=environment,
        name=f"zoscii-e2e-{stack.run_id}-{stack.name}-{name}",
        network=stack.network,
        network_aliases=[name],
        labels={RUN_LABEL: stack.run_id, "org.zoscii.e2e.stack": stack.name},
        read_only=bool(spec["read_only"]),
        cap_drop=list(spec["cap_drop"]),
        security_opt=list(spec["security_opt"]),
        healthcheck=healthcheck(spec),
    )
    for path in spec.get("tmpfs", []):
        container.with_tmpfs_mount(path)
    if "statissa:ro" in spec.get("volumes_from", []):
        container.with_volume_mapping(stack.volume.name, "/data", "ro")
    container.start()
    return container


@pytest.fixture(scope="module")
def cluster(e2e: E2E) -> Iterator[tuple[Stack, dict[str, DockerContainer]]]:
    env = {**image_tag_env(), **CLUSTER_ENV}
    specs = spark_services(env)
    with network(e2e.client, e2e.run_id, "spark") as net:
        stack = Stack(e2e.client, e2e.services, e2e.run_id, "spark", net)
        spark: dict[str, DockerContainer] = {}
        try:
            for worker in ("spark-master", *WORKERS):
                spark[worker] = start_spark_service(stack, worker, specs[worker])
            statissa_env = specs["statissa"]["environment"]
            stack.start(
                "statissa",
                env={
                    "ZOSCII_SPARK_MASTER": statissa_env["ZOSCII_SPARK_MASTER"],
                    "ZOSCII_SPARK_CONF": statissa_env["ZOSCII_SPARK_CONF"] + TEST_CONF,
                    "ZOSCII_STATISSA_INTERVAL_SECONDS": "3600",
                },
                aliases=["statissa"],  # spark.driver.host
            )
            containers = [c.get_wrapped_container() for c in spark.values()]
            wait_healthy([*containers, stack["statissa"].container], timeout=180)
            yield stack, spark
        finally:
            for container in spark.values():
                container.stop()
            stack.close()


def exec_ok(stack: Stack, command: list[str], env: Mapping[str, str] | None = None) -> str:
    container = stack["statissa"].container
    result = container.exec_run(command, environment=dict(env or {}), demux=True)
    stdout, stderr = result.output
    assert result.exit_code == 0, (
        f"{command[:3]} exited {result.exit_code}:\n{(stderr or b'').decode()[-3000:]}\n"
        f"--- statissa:\n{stack['statissa'].logs(30)}"
    )
    return (stdout or b"").decode()


def comparable(document: Mapping[str, Any]) -> dict[str, Any]:
    """The figures, without what depends on the moment of the run (ages, run times)."""
    volatile = {"oldest_age_seconds"}

    def group(g: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in g.items() if k not in volatile}

    return {
        "totals": document["totals"],
        "queues": sorted((group(q) for q in document["queues"]), key=lambda q: q["name"]),
        "store": group(document["store"]),
    }


def master_state(stack: Stack) -> dict[str, Any]:
    """The master's /json/, read from inside the statissa container (on the network)."""
    return json.loads(exec_ok(stack, ["python", "-c", GET, "http://spark-master:8080/json/"]))


def wait_for_workers(stack: Stack, timeout: float = 120) -> dict[str, Any]:
    """The master's state once every worker registered (a healthy worker container may
    still be on its way to the master); the last state seen when the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        master = master_state(stack)
        alive = {w["host"] for w in master["workers"] if w["state"] == "ALIVE"}
        if alive >= set(WORKERS) or time.monotonic() > deadline:
            return master
        time.sleep(1)


def wait_for_executors(stack: Stack, count: int, timeout: float = 180) -> None:
    """Until the application (started by statissa's first run) has ``count`` executors
    registered with the driver, so that the job can spread over all of them."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        result = stack["statissa"].container.exec_run(["python", "-c", FETCH_EXECUTORS])
        if result.exit_code == 0:
            last = json.loads(result.output.decode())
            active = [e for e in last["executors"] if e["id"] != "driver" and e["isActive"]]
            if len(active) >= count:
                return
        time.sleep(1)
    raise AssertionError(
        f"not {count} executors after {timeout:.0f} s: {last}\n{stack['statissa'].logs(60)}"
    )


def test_the_cluster_computes_what_local_mode_computes(
    cluster: tuple[Stack, dict[str, DockerContainer]],
) -> None:
    stack, _ = cluster
    master = wait_for_workers(stack)
    assert master["status"] == "ALIVE", master
    alive = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert sorted(w["host"] for w in alive) == sorted(WORKERS), master["workers"]

    wait_for_executors(stack, len(WORKERS))
    written = exec_ok(stack, ["python", "-c", WRITE_MESSAGES, json.dumps(QUEUES)])
    assert int(written) == sum(QUEUES.values())

    refresh = ["python", "-c", GET, "http://127.0.0.1:9103/refresh", ""]
    on_cluster = json.loads(exec_ok(stack, refresh))

    local = json.loads(
        exec_ok(
            stack,
            ["python", "-m", "zoscii_statissa", "--once"],
            env={
                "ZOSCII_SPARK_MASTER": "local[*]",
                "ZOSCII_SPARK_CONF": "",
                "ZOSCII_SPARK_LOCAL_DIR": "/tmp/zoscii-statissa-local",
            },
        )
    )

    assert on_cluster["totals"]["messages"] == sum(QUEUES.values())
    assert {q["name"] for q in on_cluster["queues"]} == set(QUEUES)
    assert all(q["unrecognised_files"] == 1 for q in on_cluster["queues"])
    assert any(q["expired"] for q in on_cluster["queues"])
    assert comparable(on_cluster) == comparable(local)

    # The work ran in executors on both workers, none in the driver.
    seen = json.loads(exec_ok(stack, ["python", "-c", FETCH_EXECUTORS]))
    executors = [e for e in seen["executors"] if e["id"] != "driver"]
    driver = [e for e in seen["executors"] if e["id"] == "driver"]
    hosts = {e["hostPort"].rsplit(":", 1)[0] for e in executors if e["totalTasks"] > 0}
    assert hosts == set(WORKERS), seen["executors"]
    assert all(e["totalTasks"] == 0 for e in driver), driver
    master = master_state(stack)
    assert [a["id"] for a in master["activeapps"]] == [seen["app"]], master["activeapps"]
    assert master["activeapps"][0]["name"] == "zoscii-statissa"
