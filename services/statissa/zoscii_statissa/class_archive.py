"""``python -m zoscii_statissa.class_archive PATH``: the driver JVM's class-data archive.

Spark's driver loads some 10,000 classes from jars at every start; a dynamic CDS
archive (``-XX:ArchiveClassesAtExit``) keeps them parsed and verified in one mapped
file, and a driver started with it (``ZOSCII_SPARK_CLASS_ARCHIVE``, see ``spark``) is
ready about 1.4 s sooner (docs/benchmarks.md, statissa at scale). The archive is made
by one real computation over a small data directory, so it holds what a computation
loads, and it is only valid for the Java and the jars that made it: the image build
makes it (deploy/Dockerfile), the scale bench makes its own for the host.

The JVM writes the archive as it exits, after Python let go of it; this waits for that
and checks the file, so a build never ships half an archive.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
import time
from pathlib import Path

from pyspark import SparkContext

from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.settings import Settings
from zoscii_statissa.spark import SparkScanner, spark_conf
from zosciimq.core import DataDir, QueueStore, Upload
from zosciimq.core.outgoing import Outgoing

log = logging.getLogger(__name__)
JVM_EXIT_SECONDS = 120


def make_archive(archive: Path, settings: Settings) -> int:
    """Run one computation with a driver that dumps its classes to ``archive`` at exit;
    the archive's size in bytes. Needs a process of its own: it ends its JVM."""
    if SparkContext._active_spark_context is not None:
        raise RuntimeError("a class archive needs a process without a running Spark")
    archive.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="zoscii-class-archive-") as tmp:
        data_dir = DataDir(Path(tmp) / "data")
        data_dir.ensure()
        _publish_one(data_dir)
        core = dataclasses.replace(settings.core, data_dir=data_dir.root)
        settings = dataclasses.replace(
            settings,
            core=core,
            spark_local_dir=Path(tmp) / "spark",
            spark_class_archive=Path(tmp) / "none",  # never load one while making one
        )
        options = spark_conf(settings).get("spark.driver.extraJavaOptions") or ""
        dump = f"{options} -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
        settings = dataclasses.replace(
            settings,
            spark_master="local[*]",
            spark_conf=(*settings.spark_conf, ("spark.driver.extraJavaOptions", dump)),
        )
        scanner = SparkScanner(settings)
        compute_snapshot(scanner, data_dir, time.time())
        jvm = scanner.jvm_process()
        scanner.stop()
        if jvm is not None:  # the JVM ends when its stdin closes, then writes the archive
            jvm.stdin.close()
            jvm.wait(JVM_EXIT_SECONDS)
    if not archive.is_file() or archive.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class archive at {archive}")
    return archive.stat().st_size


def _publish_one(data_dir: DataDir) -> None:
    upload = Upload(data_dir)
    upload.write(b"class archive")
    QueueStore(data_dir).publish_many("archive", [Outgoing(upload, 1)])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m zoscii_statissa.class_archive PATH", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    size = make_archive(Path(args[0]).resolve(), Settings.from_env())
    log.info("class archive %s: %.1f MB", args[0], size / 1e6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
