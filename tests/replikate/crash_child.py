"""replikate that kills itself (SIGKILL) right before its Nth pointer save, for the crash tests.

Usage: python -m tests.replikate.crash_child N [zoscii_replikate arguments...]

The Nth save comes right after a batch was written locally: so the process dies in the
window between the batch write and the pointer save, as a kill -9 or a power cut could
make it. Before dying it prints ``dying-before-saving <pointer>`` (the name it was about
to save), so the test knows which batch was written without its pointer.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from zoscii_replikate import __main__ as cli
from zoscii_replikate import replicator


def main() -> int:
    die_at, saves = int(sys.argv[1]), 0
    save = replicator.write_pointer

    def write_pointer(path: Path, pointer: str) -> None:
        nonlocal saves
        saves += 1
        if saves == die_at:
            print(f"dying-before-saving {pointer}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        save(path, pointer)

    replicator.write_pointer = write_pointer
    return cli.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
