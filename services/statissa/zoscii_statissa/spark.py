"""The Spark side: one long-lived context and the job that aggregates the data directory.

The driver lists only the top-level directories (queues and the store's fan-out, see
``scan.list_tasks``); each becomes one element of an RDD, executors list their
directories in parallel from the shared volume and fold each partition into one dict of
per-group aggregates, which the driver merges. One stage, no shuffle, and only
aggregates reach the driver, so a million files cost the driver nothing. Spark's
``binaryFile`` source is deliberately not used: it reads contents, and statistics must
never read a message.

The job uses RDDs only, so the service starts a bare ``SparkContext``: a ``SparkSession``
loads Spark SQL on top, which costs seconds of start and nothing the job needs
(``build_session`` is kept for code that wants one).
"""

from __future__ import annotations

import logging
import os
import sys
import zipfile
from functools import partial
from pathlib import Path
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

import zoscii_statissa
import zosciimq
from zoscii_statissa.scan import GroupKey, Partial, list_tasks, merge_into, scan_partition
from zoscii_statissa.settings import Settings
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

TASKS_PER_CORE = 3
# JVM flags for the driver, the launcher and executors: the JVMs schedule and relay
# aggregates (the scan runs in Python), so the client compiler (C1 only) and the serial
# collector start faster on a few cores and lose nothing measurable (docs/benchmarks.md).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
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


def spark_conf(settings: Settings, *, shuffle_partitions: int = 8) -> SparkConf:
    """Statissa's properties: quiet, every temp file under ``spark_local_dir``, quick JVMs.

    Local mode binds to loopback and runs executors' Python with this interpreter.
    ``ZOSCII_SPARK_CONF`` pairs come last and win.
    """
    work = settings.spark_local_dir
    for sub in ("spark", "warehouse", "pyfiles"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    driver_options = (
        f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={work} {QUICK_JVM}"
        + class_archive_options(settings.spark_class_archive)
    )
    conf = (
        SparkConf()
        .setMaster(settings.spark_master)
        .setAppName("zoscii-statissa")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .set("spark.local.dir", str(work / "spark"))
        .set("spark.sql.warehouse.dir", str(work / "warehouse"))
        .set("spark.driver.memory", settings.spark_driver_memory)
        .set("spark.driver.extraJavaOptions", driver_options)
        .set("spark.executor.extraJavaOptions", QUICK_JVM)
    )
    if settings.spark_is_local:
        conf = conf.set("spark.driver.host", "127.0.0.1").set(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in extra_conf(settings).items():
        conf = conf.set(key, value)
    return conf


def class_archive_options(archive: Path) -> str:
    """The driver JVM's flags to load ``archive`` when it exists. A JVM that cannot use
    it (another Java, another class path) starts without it, silently."""
    if not archive.is_file():
        return ""
    return f" -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def build_context(settings: Settings) -> SparkContext:
    """Start (or join) the process's SparkContext, with our packages shipped to executors.

    The packages the executors import are zipped and shipped with ``addPyFile`` in every
    mode, so a cluster needs nothing of ours installed, only Python and the same volume
    mounted at the same path.
    """
    conf = spark_conf(settings)
    _prepare_environment(settings)
    log.info("starting Spark (master %s)", settings.spark_master)
    context = SparkContext.getOrCreate(conf)
    _ready(context, settings)
    return context


def build_session(settings: Settings, *, shuffle_partitions: int = 8) -> SparkSession:
    """A SparkSession over ``build_context``'s properties, for code that wants Spark SQL."""
    conf = spark_conf(settings, shuffle_partitions=shuffle_partitions)
    _prepare_environment(settings)
    log.info("starting Spark with Spark SQL (master %s)", settings.spark_master)
    session = SparkSession.builder.config(conf=conf).getOrCreate()
    _ready(session.sparkContext, settings)
    return session


def _prepare_environment(settings: Settings) -> None:
    """What the launcher scripts, the JVM and the Python workers read from the environment."""
    # spark-submit first runs a small JVM (org.apache.spark.launcher.Main) to build the
    # driver's command line: the same quick flags shorten that one too.
    os.environ.setdefault("SPARK_LAUNCHER_OPTS", QUICK_JVM)
    if settings.spark_is_local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _ready(context: SparkContext, settings: Settings) -> None:
    context.setLogLevel("WARN")
    ship_packages(context, settings.spark_local_dir / "pyfiles")
    log.info(
        "Spark ready: version %s, %d default parallelism",
        context.version,
        context.defaultParallelism,
    )


def extra_conf(settings: Settings) -> dict[str, str]:
    """``DEFAULT_CONF``, then the pairs of ``ZOSCII_SPARK_CONF`` (a later pair wins)."""
    return dict((*DEFAULT_CONF, *settings.spark_conf))


def ship_packages(context: SparkContext, directory: Path) -> Path:
    """Zip ``zosciimq`` and ``zoscii_statissa`` (sources only) and add them to executors."""
    target = packages_zip(directory)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in (zosciimq, zoscii_statissa):
            root = Path(package.__path__[0]).resolve()
            for source in sorted(root.rglob("*.py")):
                archive.write(source, source.relative_to(root.parent).as_posix())
    context.addPyFile(str(target))
    return target


def packages_zip(directory: Path) -> Path:
    """Per process, so several statissa processes can share one /tmp."""
    return directory / f"zoscii-statissa-{os.getpid()}.zip"


def spark_scan(
    spark: SparkContext | SparkSession, data_dir: DataDir, now: float
) -> dict[GroupKey, Partial]:
    """Aggregate every queue and the store; the driver lists at most queues + 36 paths and
    receives one small dict per partition."""
    tasks = list_tasks(data_dir)
    if not tasks:
        return {}
    sc = spark.sparkContext if isinstance(spark, SparkSession) else spark
    per_partition = (
        sc.parallelize(tasks, numSlices=partitions(len(tasks), sc.defaultParallelism))
        .mapPartitions(partial(scan_partition, now=now))
        .collect()
    )
    totals: dict[GroupKey, Partial] = {}
    for aggregates in per_partition:
        merge_into(totals, aggregates.items())
    return totals


def partitions(tasks: int, parallelism: int) -> int:
    """A few directories per partition: enough partitions to keep every core busy while
    big and small directories even out, few enough that per-task overhead stays small."""
    return max(1, min(tasks, max(1, parallelism) * TASKS_PER_CORE))


class SparkScanner:
    """A ``compute.Scanner`` that starts Spark on first use and restarts it if it died.

    Starting lazily lets the HTTP server answer (health, "first run in progress") during
    the JVM's start-up instead of after it.
    """

    def __init__(self, settings: Settings, context: SparkContext | None = None) -> None:
        self._settings = settings
        self._context = context

    def __call__(self, data_dir: DataDir, now: float) -> dict[GroupKey, Partial]:
        if self._context is None:
            self._context = build_context(self._settings)
        try:
            return spark_scan(self._context, data_dir, now)
        except Exception:
            if not _alive(self._context):
                log.error("the Spark context has stopped; a new one starts on the next run")
                _forget(self._context)
                self._context = None
            raise

    def jvm_process(self) -> Any:
        """The driver JVM's process (a Popen), while Spark runs here; else None."""
        return None if self._context is None else getattr(self._context._gateway, "proc", None)

    def cancel(self) -> None:
        """Cancel a computation in progress, so a SIGTERM does not wait for it to end."""
        context = self._context
        if context is not None and _alive(context):
            try:
                context.cancelAllJobs()
            except Exception as exc:  # the JVM may be going away already
                log.warning("cancelling Spark jobs failed: %s", exc)

    def stop(self) -> None:
        context, self._context = self._context, None
        if context is None:
            return
        packages_zip(self._settings.spark_local_dir / "pyfiles").unlink(missing_ok=True)
        if not _alive(context):
            log.warning("Spark had already stopped (its JVM was signalled or died)")
            _forget(context)
            return
        try:
            context.stop()
        except Exception as exc:
            log.warning("stopping Spark failed: %s", exc)


def _alive(context: SparkContext) -> bool:
    """Whether the JVM runs and the context is not stopped, without py4j noise if it died."""
    process = getattr(context._gateway, "proc", None)
    if process is not None and process.poll() is not None:
        return False
    try:
        return not context._jsc.sc().isStopped()
    except Exception:
        return False


def _forget(context: SparkContext) -> None:
    """Drop PySpark's process-wide handles on a dead JVM so the next start launches a new one.

    PySpark caches the gateway, the active context and the session on their classes; with
    the JVM gone each would hand the dead connection back. There is no public API for
    this, hence the private names, kept in this one place.
    """
    process = getattr(context._gateway, "proc", None)
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    if process is not None and process.poll() is None:
        process.kill()  # stopped but still running: not ours to reuse any more
