"""The driver's class-data archive: made by one computation, used only when it exists,
and never a reason for different figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.statissa.datadir import build_data_dir
from zoscii_statissa import spark as sparkside
from zoscii_statissa.class_archive import make_archive
from zoscii_statissa.settings import Settings
from zosciimq.core import DataDir


@pytest.mark.slow  # a Spark session: a JVM's start
def test_making_an_archive_refuses_a_process_with_spark_running(
    spark: object, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="without a running Spark"):
        make_archive(tmp_path / "classes.jsa", Settings(spark_local_dir=tmp_path))
    assert not (tmp_path / "classes.jsa").exists()


def test_the_driver_loads_an_archive_only_when_it_exists(tmp_path: Path) -> None:
    missing = Settings(spark_local_dir=tmp_path, spark_class_archive=tmp_path / "none.jsa")
    options = dict(sparkside.spark_conf(missing).getAll())["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in options
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"not really")
    there = Settings(spark_local_dir=tmp_path, spark_class_archive=archive)
    conf = dict(sparkside.spark_conf(there).getAll())
    assert f"-XX:SharedArchiveFile={archive} -Xshare:auto" in conf["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in conf["spark.executor.extraJavaOptions"]  # other class paths


@pytest.mark.slow
def test_an_archive_made_here_gives_the_same_figures(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    made = subprocess.run(  # its own process: making one ends the JVM (and this has one)
        [sys.executable, "-m", "zoscii_statissa.class_archive", str(archive)],
        env={**os.environ, "ZOSCII_SPARK_LOCAL_DIR": str(tmp_path / "make")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    assert archive.stat().st_size > 1_000_000
    data = DataDir(tmp_path / "data")
    build_data_dir(data.root)
    figures = []
    for used in (archive, tmp_path / "none.jsa"):
        env = {
            **os.environ,
            "ZOSCII_DATA_DIR": str(data.root),
            "ZOSCII_SPARK_LOCAL_DIR": str(tmp_path / "run"),
            "ZOSCII_SPARK_CLASS_ARCHIVE": str(used),
        }
        done = subprocess.run(
            [sys.executable, "-m", "zoscii_statissa", "--once"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        figures.append(_timeless(json.loads(done.stdout)))
    assert figures[0] == figures[1]
    assert figures[0]["queues"], "the data directory's queues were counted"


def _timeless(value: object) -> object:
    """The snapshot without what depends on when it was computed (its time, ages)."""
    if isinstance(value, dict):
        return {
            key: _timeless(item)
            for key, item in value.items()
            if not key.startswith("generated") and "age" not in key and "duration" not in key
        }
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value
