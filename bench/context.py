"""What every scenario gets: the mode, a temp root on the measured disk, the api, the results."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import Results
from bench.servers import Api, start_api

log = logging.getLogger(__name__)

PAYLOAD_1K = bytes(range(256)) * 4  # 1 KB with every byte value: binary, not UTF-8


@dataclass
class Context:
    quick: bool
    containers: bool
    root: Path  # this run's temp directory, on the disk whose ceilings are measured
    results: Results
    workers: int = 2
    threads: int = 8
    # Ceilings measured by one scenario and used by another, e.g. the durable write rate
    # (publish) for replication, or walking N files (depth) for claireup and statissa.
    shared: dict[str, float] = field(default_factory=dict)

    def fresh_dir(self, name: str) -> Path:
        path = self.root / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def remove(self, path: Path) -> None:
        log.info("removing %s", path)
        shutil.rmtree(path, ignore_errors=True)

    @contextmanager
    def api(self, data_dir: Path, env: dict[str, str] | None = None) -> Iterator[Api]:
        """The api on ``data_dir``; ``env``: settings of its own (``ZOSCII_DURABILITY``)."""
        server = start_api(
            data_dir,
            containers=self.containers,
            workers=self.workers,
            threads=self.threads,
            env=env,
        )
        log.info("api on %s (data dir %s%s)", server.url, data_dir, f", {env}" if env else "")
        try:
            yield server
        finally:
            server.stop()
