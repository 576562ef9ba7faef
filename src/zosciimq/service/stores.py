"""The queue and consumer-group stores a service opens on the volume.

Every front end that publishes or leases (the api, the live service, the PHPMQ and
ZeroMQ gateways) must agree on what its settings make of them: the queue policy, the
default retention, the durability mode and the deliveries before a message is
dead-lettered. They open them here, so a new setting reaches all of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from zosciimq.core.clock import Clock, utc_now
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.layout import DataDir
from zosciimq.core.policy import PolicySource
from zosciimq.core.queues import QueueStore
from zosciimq.settings import CoreSettings


@dataclass(frozen=True)
class Stores:
    data_dir: DataDir
    queues: QueueStore
    groups: ConsumerGroups


def open_stores(
    core: CoreSettings, policy: PolicySource, max_deliveries: int, *, clock: Clock = utc_now
) -> Stores:
    """The stores of ``core.data_dir`` as ``core``, ``policy`` and ``max_deliveries`` say."""
    data_dir = DataDir(core.data_dir)
    queues = QueueStore(
        data_dir,
        clock=clock,
        rules=policy.rule_for,
        default_retention_days=core.default_retention_days,
        durability=core.durability(),
    )
    groups = ConsumerGroups(
        data_dir,
        queues,
        max_deliveries=max_deliveries,
        max_deliveries_for=policy.max_deliveries_for,
    )
    return Stores(data_dir, queues, groups)
