"""A job's pointer file and lock, and the ``pointer show|reset`` commands.

The file is the protocol's ``states/replikate_state_<sq>_<tq or store>.txt`` holding
only the last source name replicated, so the original replikate.php and this service
can take over from each other. Where it lies and how it is written is the core's
(``zosciimq.core.states``); this module only knows which file belongs to which job.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock
from zosciimq.core.names import clean_pointer
from zosciimq.core.states import read_pointer, state_path, write_pointer
from zosciimq.errors import InvalidInput

if TYPE_CHECKING:  # settings imports this module to refuse two jobs on one pointer file
    from zoscii_replikate.settings import JobConfig


def pointer_path(data_dir: DataDir, job: JobConfig) -> Path:
    """The job's own ``pointer_file`` if it has one, else the protocol's name."""
    if job.pointer_file:
        return data_dir.state_path(job.pointer_file)
    return state_path(data_dir, job.source_queue, job.target_queue)


def job_lock(data_dir: DataDir, job: JobConfig) -> FileLock:
    """Held while a job runs, by whichever process or container runs it."""
    return FileLock(data_dir.job_lock_path(job.name))


class JobBusy(RuntimeError):
    pass


def show(data_dir: DataDir, job: JobConfig) -> str:
    path = pointer_path(data_dir, job)
    pointer = read_pointer(path)
    return f"{job.name}: {path}\n{pointer or '(empty: replication starts at the first message)'}"


def reset(data_dir: DataDir, job: JobConfig, to: str = "") -> str:
    """Set the pointer (empty: from the start), refusing while the job runs anywhere."""
    pointer = clean_pointer(to)
    lock = job_lock(data_dir, job)
    if not lock.try_acquire():
        raise JobBusy(f"job {job.name} is running (lock {lock.path} held); try again later")
    try:
        path = pointer_path(data_dir, job)
        try:
            previous = read_pointer(path)
        except InvalidInput:
            previous = "(unreadable)"  # resetting is how a damaged pointer file is fixed
        write_pointer(path, pointer)
    finally:
        lock.release()
    return f"{job.name}: pointer {previous or '(empty)'} -> {pointer or '(empty)'}"
