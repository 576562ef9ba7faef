"""The Spark side's own choices: properties, partitions, and the job on a bare context."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.statissa.datadir import NOW, build_data_dir
from zoscii_statissa import spark as sparkside
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.settings import Settings
from zosciimq.core import DataDir


def test_properties_start_quick_jvms_and_spark_conf_still_wins(tmp_path: Path) -> None:
    settings = Settings(spark_local_dir=tmp_path)
    conf = dict(sparkside.spark_conf(settings).getAll())
    assert sparkside.QUICK_JVM in conf["spark.driver.extraJavaOptions"]
    assert "-Dlog4j2.configurationFile=file:" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.executor.extraJavaOptions"] == sparkside.QUICK_JVM
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"  # local mode
    mine = Settings(
        spark_master="spark://master:7077",
        spark_local_dir=tmp_path,
        spark_conf=(("spark.executor.extraJavaOptions", "-Xss4m"),),
    )
    conf = dict(sparkside.spark_conf(mine).getAll())
    assert conf["spark.executor.extraJavaOptions"] == "-Xss4m"


def test_the_launcher_jvm_gets_the_quick_flags_unless_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Settings(spark_master="spark://m:7077", spark_local_dir=tmp_path)
    monkeypatch.delenv("SPARK_LAUNCHER_OPTS", raising=False)
    sparkside._prepare_environment(cluster)
    assert os.environ["SPARK_LAUNCHER_OPTS"] == sparkside.QUICK_JVM
    monkeypatch.setenv("SPARK_LAUNCHER_OPTS", "-Xmx64m")
    sparkside._prepare_environment(cluster)
    assert os.environ["SPARK_LAUNCHER_OPTS"] == "-Xmx64m"


@pytest.mark.parametrize(
    ("tasks", "parallelism", "expected"),
    [(1, 2, 1), (100, 2, 6), (5, 2, 5), (100, 0, 3), (136, 16, 48)],
)
def test_partitions(tasks: int, parallelism: int, expected: int) -> None:
    assert sparkside.partitions(tasks, parallelism) == expected


@pytest.mark.slow  # the session's JVM (conftest)
def test_the_job_runs_on_a_bare_context_in_one_stage(spark: Any, tmp_path: Path) -> None:
    """The service's path (no SparkSession): the figures of the plain loop, one stage."""
    root = tmp_path / "data"
    build_data_dir(root)
    context = spark.sparkContext
    before = context.statusTracker().getJobIdsForGroup(None)
    figures = sparkside.spark_scan(context, DataDir(root), NOW.timestamp())
    assert figures == scan_locally(DataDir(root), NOW.timestamp())
    jobs = [j for j in context.statusTracker().getJobIdsForGroup(None) if j not in before]
    assert len(jobs) == 1
    job = context.statusTracker().getJobInfo(jobs[0])
    assert job is not None and len(job.stageIds) == 1  # no shuffle


def test_nothing_to_scan_starts_no_job(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "empty")
    assert sparkside.spark_scan(None, data_dir, NOW.timestamp()) == {}  # type: ignore[arg-type]
