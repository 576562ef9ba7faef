"""The Spark side: one long-lived session and the job that aggregates the data directory.

The driver lists only the top-level directories (queues and the store's fan-out, see
``scan.list_tasks``); each becomes one element of an RDD, executors list their
directories in parallel from the shared volume and fold them into per-directory
aggregates, and ``reduceByKey`` merges those. Only aggregates reach the driver, so a
million files cost the driver nothing. Spark's ``binaryFile`` source is deliberately not
used: it reads contents, and statistics must never read a message.
"""

from __future__ import annotations

import logging
import os
import sys
import zipfile
from functools import partial
from pathlib import Path

from pyspark.sql import SparkSession

import zoscii_statissa
import zosciimq
from zoscii_statissa.scan import GroupKey, Partial, list_tasks, merge_partials, scan_tasks
from zoscii_statissa.settings import Settings
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

TASKS_PER_CORE = 3
# Spark properties statissa sets unless ZOSCII_SPARK_CONF names them too (its pairs win).
DEFAULT_CONF: tuple[tuple[str, str], ...] = (
    # Spark's default for map statuses (zstd) loads a native library it unpacks into the
    # temp directory, which is noexec in our containers: on a cluster the driver then
    # cannot send the map outputs and every job fails. lz4 works there (and costs local
    # mode nothing: map statuses are only serialised for remote executors).
    ("spark.shuffle.mapStatus.compression.codec", "lz4"),
)

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss} %p spark.%c{1}: %m%n%ex
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = error
logger.sparkconf.name = org.apache.spark.SparkConf
logger.sparkconf.level = error
"""


def build_session(settings: Settings, *, shuffle_partitions: int = 8) -> SparkSession:
    """Start (or join) the process's SparkSession, quiet and with every temp file in /tmp.

    Local mode binds to loopback and runs executors' Python with this interpreter. The
    packages the executors import are zipped and shipped with ``addPyFile`` in every
    mode, so a cluster needs nothing of ours installed, only Python and the same volume
    mounted at the same path.
    """
    work = settings.spark_local_dir
    for sub in ("spark", "warehouse", "pyfiles"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    java_options = f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={work}"
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName("zoscii-statissa")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.local.dir", str(work / "spark"))
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.driver.extraJavaOptions", java_options)
    )
    if settings.spark_is_local:
        # Read by the JVM and the Python workers it starts, so they go in the environment.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in extra_conf(settings).items():
        builder = builder.config(key, value)
    log.info("starting Spark (master %s)", settings.spark_master)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    ship_packages(session, work / "pyfiles")
    log.info(
        "Spark ready: version %s, %d default parallelism",
        session.version,
        session.sparkContext.defaultParallelism,
    )
    return session


def extra_conf(settings: Settings) -> dict[str, str]:
    """``DEFAULT_CONF``, then the pairs of ``ZOSCII_SPARK_CONF`` (a later pair wins)."""
    return dict((*DEFAULT_CONF, *settings.spark_conf))


def ship_packages(session: SparkSession, directory: Path) -> Path:
    """Zip ``zosciimq`` and ``zoscii_statissa`` (sources only) and add them to executors."""
    target = packages_zip(directory)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in (zosciimq, zoscii_statissa):
            root = Path(package.__file__).resolve().parent
            for source in sorted(root.rglob("*.py")):
                archive.write(source, source.relative_to(root.parent).as_posix())
    session.sparkContext.addPyFile(str(target))
    return target


def packages_zip(directory: Path) -> Path:
    """Per process, so several statissa processes can share one /tmp."""
    return directory / f"zoscii-statissa-{os.getpid()}.zip"


def spark_scan(session: SparkSession, data_dir: DataDir, now: float) -> dict[GroupKey, Partial]:
    """Aggregate every queue and the store; the driver lists at most queues + 36 paths."""
    tasks = list_tasks(data_dir)
    if not tasks:
        return {}
    sc = session.sparkContext
    # A few directories per task: enough tasks to keep every core busy while big and
    # small directories even out, few enough that per-task overhead stays small.
    slices = min(len(tasks), max(1, sc.defaultParallelism) * TASKS_PER_CORE)
    merged = (
        sc.parallelize(tasks, numSlices=slices)
        .mapPartitions(partial(scan_tasks, now=now))
        .reduceByKey(merge_partials, numPartitions=1)  # one tiny aggregate per group
        .collect()
    )
    return dict(merged)


class SparkScanner:
    """A ``compute.Scanner`` that starts Spark on first use and restarts it if it died.

    Starting lazily lets the HTTP server answer (health, "first run in progress") during
    the JVM's start-up instead of after it.
    """

    def __init__(self, settings: Settings, session: SparkSession | None = None) -> None:
        self._settings = settings
        self._session = session

    def __call__(self, data_dir: DataDir, now: float) -> dict[GroupKey, Partial]:
        if self._session is None:
            self._session = build_session(self._settings)
        try:
            return spark_scan(self._session, data_dir, now)
        except Exception:
            if not _alive(self._session):
                log.error("the Spark context has stopped; a new one starts on the next run")
                _forget(self._session)
                self._session = None
            raise

    def cancel(self) -> None:
        """Cancel a computation in progress, so a SIGTERM does not wait for it to end."""
        session = self._session
        if session is not None and _alive(session):
            try:
                session.sparkContext.cancelAllJobs()
            except Exception as exc:  # the JVM may be going away already
                log.warning("cancelling Spark jobs failed: %s", exc)

    def stop(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        packages_zip(self._settings.spark_local_dir / "pyfiles").unlink(missing_ok=True)
        if not _alive(session):
            log.warning("Spark had already stopped (its JVM was signalled or died)")
            _forget(session)
            return
        try:
            session.stop()
        except Exception as exc:
            log.warning("stopping Spark failed: %s", exc)


def _alive(session: SparkSession) -> bool:
    """Whether the JVM runs and the context is not stopped, without py4j noise if it died."""
    process = getattr(session.sparkContext._gateway, "proc", None)
    if process is not None and process.poll() is not None:
        return False
    try:
        return not session.sparkContext._jsc.sc().isStopped()  # type: ignore[union-attr]
    except Exception:
        return False


def _forget(session: SparkSession) -> None:
    """Drop PySpark's process-wide handles on a dead JVM so the next start launches a new one.

    PySpark caches the gateway, the active context and the session on their classes; with
    the JVM gone each would hand the dead connection back. There is no public API for
    this, hence the private names, kept in this one place.
    """
    from pyspark import SparkContext

    process = getattr(session.sparkContext._gateway, "proc", None)
    with SparkContext._lock:
        SparkContext._active_spark_context = None  # type: ignore[attr-defined]
        SparkContext._gateway = None  # type: ignore[attr-defined]
        SparkContext._jvm = None  # type: ignore[attr-defined]
    SparkSession._instantiatedSession = None  # type: ignore[attr-defined]
    SparkSession._activeSession = None  # type: ignore[attr-defined]
    if process is not None and process.poll() is None:
        process.kill()  # stopped but still running: not ours to reuse any more
