"""How many messages the api (and the live service) served per queue, from their /metrics.

The files on the volume tell what was published and what is left, never what was
fetched: a consumer following a pointer leaves no trace on disk. The api counts every
message it serves (``zoscii_api_messages_fetched_total{queue}``: pointer fetches, batch
fetches and consumer-group deliveries), so each computation reads that counter and the
history keeps it; the console charts the fetch rate from the differences between points
(``history.fetch_rates``), as Prometheus' ``rate()`` would. The live service, which
answers the waiting fetches behind the proxy, counts what it serves the same way
(``zoscii_live_messages_fetched_total{queue}``): list its /metrics too, both are added.

Every listed api is asked (one per api container; their counters are added up). When
any of them does not answer, the point records no fetch counts at all: a partial sum
would read as a counter reset. Under access control /metrics needs the ``metrics``
right: ``ZOSCII_STATISSA_API_METRICS_TOKEN`` is sent as a bearer token.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import requests
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

# the api's and the live service's Counters (samples end in _total)
FAMILIES = ("zoscii_api_messages_fetched", "zoscii_live_messages_fetched")
MAX_BYTES = 16 * 1024 * 1024  # one api's /metrics; more is not an api we know


class FetchCounts:
    """Reads the api's fetched-messages counters; ``read`` never raises."""

    def __init__(self, urls: Sequence[str], token: str = "", timeout: float = 5.0) -> None:
        self.urls = tuple(urls)
        self.timeout = timeout
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.last_error = ""

    def read(self) -> dict[str, float] | None:
        """Messages served per queue since each api started, summed over the apis;
        None when there is no api to ask or one of them failed (logged once per
        distinct failure, and once when it works again)."""
        if not self.urls:
            return None
        totals: dict[str, float] = {}
        try:
            for url in self.urls:
                for queue, count in self._read_one(url).items():
                    totals[queue] = totals.get(queue, 0.0) + count
        except (requests.RequestException, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            if error != self.last_error:
                log.warning("fetch counts not read from the api: %s", error)
            self.last_error = error
            return None
        if self.last_error:
            log.info("fetch counts read from the api again")
        self.last_error = ""
        return totals

    def _read_one(self, url: str) -> dict[str, float]:
        with self.session.get(url, timeout=self.timeout, stream=True) as reply:
            reply.raise_for_status()
            body = reply.raw.read(MAX_BYTES + 1, decode_content=True)
        if len(body) > MAX_BYTES:
            raise ValueError(f"{url} answered more than {MAX_BYTES} bytes")
        counts: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
            if family.name not in FAMILIES:
                continue
            for sample in family.samples:
                queue = sample.labels.get("queue")
                if sample.name == family.name + "_total" and queue:
                    counts[queue] = counts.get(queue, 0.0) + sample.value
        return counts

    def close(self) -> None:
        self.session.close()
