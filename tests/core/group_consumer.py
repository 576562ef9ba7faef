"""A consumer process for the group tests:
``python -m tests.core.group_consumer DATA NAME [HOLD_AFTER]``.

Consumes group "g" of queue "q" in batches of 10 with 1-second leases, prints each name
it acked (after the ack returned), and exits when the group has nothing left for a while.
With HOLD_AFTER, once it has acked that many it leases one more batch, prints
``HOLDING`` and waits without acking, to be killed with its leases outstanding.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from zosciimq.core import DataDir, QueueStore
from zosciimq.core.groups import ConsumerGroups


def main() -> None:
    layout = DataDir(Path(sys.argv[1]))
    groups = ConsumerGroups(layout, QueueStore(layout))
    hold_after = int(sys.argv[3]) if len(sys.argv) > 3 else None
    acked = 0
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 3:
        got = groups.consume("q", "g", count=10, lease=1.0, consumer=sys.argv[2])
        if not got:
            time.sleep(0.05)
            continue
        idle_since = time.monotonic()
        if hold_after is not None and acked >= hold_after:
            sys.stdout.write("HOLDING\n")
            sys.stdout.flush()
            time.sleep(600)
        for delivery in got:
            delivery.file.close()
        outcomes = groups.ack("q", "g", [d.receipt for d in got])
        for outcome in outcomes:
            if outcome.result == "ok":
                sys.stdout.write(outcome.name + "\n")
                acked += 1
        sys.stdout.flush()


if __name__ == "__main__":
    main()
