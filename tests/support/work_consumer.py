"""A competing consumer process for the work-queue storm tests.

Usage: python -m tests.support.work_consumer URL QUEUE GROUP NAME COUNT LEASE IDLE_WAIT [step]

Consumes batches of COUNT with a lease of LEASE seconds over HTTP and acks each batch in
one request, until it has found nothing for IDLE_WAIT seconds. It asks with
``wait=IDLE_WAIT``, but an api whose long-poll slots are taken answers "nothing" at once
(its cap on waiting requests), so the idle time is measured here, asking again. It prints, one
line each and flushed at once, so that a test that kills it with SIGKILL knows what it
held and what it may have acked:

* ``GOT <name> ...`` after a consume reply (the names now leased to it);
* ``SENT <name> ...`` just before the ack request (from here on the server may have
  acked them even if no reply is ever read);
* ``ACKED <name> ...`` and ``FENCED <name> ...`` after the ack reply (``FENCED``: the
  lease ran out and went to someone else, or any other outcome than ``ok``);
* ``DONE`` when it stops by itself.

With ``step``, after each ``GOT`` it waits for a line on stdin before it goes on, so
that a test can kill it holding leases it has not even tried to ack.
"""

from __future__ import annotations

import sys
import time

import requests

from tests.support.work_http import ack, consume


def say(*words: str) -> None:
    sys.stdout.write(" ".join(words) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    url, queue, group, name, count, lease, idle_wait = argv[:7]
    step = argv[7:] == ["step"]
    idle_since: float | None = None
    with requests.Session() as session:
        while True:
            leased = consume(
                session,
                url,
                queue,
                group,
                count=int(count),
                lease=int(lease),
                wait=int(idle_wait),
                consumer=name,
            )
            if not leased:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= int(idle_wait):
                    say("DONE")
                    return 0
                time.sleep(0.1)  # answered at once: the api's waiting slots were taken
                continue
            idle_since = None
            names = [m.name for m in leased]
            say("GOT", *names)
            if step and not sys.stdin.readline():
                return 0  # the test went away
            say("SENT", *names)
            results = ack(session, url, queue, group, [m.receipt for m in leased])
            ok = [r.name for r in results if r.result == "ok"]
            other = [r.name for r in results if r.result != "ok"]
            if ok:
                say("ACKED", *ok)
            if other:
                say("FENCED", *other)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
