"""The figures being served: computations run one at a time, the last good one kept.

A failed run never replaces the figures being served: it only shows up in the run
status (metrics ``zoscii_statissa_last_run_success`` and ``..._runs_failed_total``, the
page's banner) and in the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from zoscii_statissa.model import Snapshot

log = logging.getLogger(__name__)

Compute = Callable[[float], Snapshot]  # now (Unix seconds) -> snapshot


@dataclass(frozen=True)
class RunStatus:
    runs_total: int = 0
    runs_failed_total: int = 0
    last_run_success: bool | None = None  # None: no run finished yet
    last_run_finished_at: float | None = None  # Unix seconds, wall clock
    last_run_duration_seconds: float | None = None
    last_success_at: float | None = None  # the served snapshot's "now"
    last_error: str = ""
    running: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "runs_total": self.runs_total,
            "runs_failed_total": self.runs_failed_total,
            "last_run_success": self.last_run_success,
            "last_run_finished_at": self.last_run_finished_at,
            "last_run_duration_seconds": self.last_run_duration_seconds,
            "last_success_at": self.last_success_at,
            "last_error": self.last_error,
            "running": self.running,
        }


class SnapshotKeeper:
    """Thread-safe holder of the latest snapshot; ``refresh`` is what the scheduler calls."""

    def __init__(self, compute: Compute, clock: Callable[[], datetime]) -> None:
        self._compute = compute
        self._clock = clock
        self._run_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._status = RunStatus()

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    @property
    def status(self) -> RunStatus:
        return self._status

    def refresh(self) -> Snapshot:
        """Compute now (waiting for a run in progress first); raises if the run fails."""
        with self._run_lock:
            self._set(running=True)
            started = time.monotonic()
            now = self._clock().timestamp()
            try:
                snapshot = self._compute(now)
            except Exception as exc:
                duration = time.monotonic() - started
                log.exception(
                    "statistics run failed after %.2fs; keeping the last figures", duration
                )
                self._finish(False, duration, error=f"{type(exc).__name__}: {exc}")
                raise
            duration = time.monotonic() - started
            self._snapshot = snapshot
            self._finish(True, duration, success_at=snapshot.generated_at)
            return snapshot

    def refresh_quietly(self) -> None:
        """For the scheduler: a failure is already logged and counted by ``refresh``."""
        try:
            self.refresh()
        except Exception:
            pass

    def _finish(
        self, success: bool, duration: float, *, error: str = "", success_at: float | None = None
    ) -> None:
        with self._state_lock:
            status = self._status
            self._status = replace(
                status,
                runs_total=status.runs_total + 1,
                runs_failed_total=status.runs_failed_total + (0 if success else 1),
                last_run_success=success,
                last_run_finished_at=self._clock().timestamp(),
                last_run_duration_seconds=duration,
                last_success_at=success_at if success else status.last_success_at,
                last_error="" if success else error,
                running=False,
            )

    def _set(self, **changes: object) -> None:
        with self._state_lock:
            self._status = replace(self._status, **changes)  # type: ignore[arg-type]
