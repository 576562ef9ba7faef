"""replikate's metric labels survive a Prometheus scrape unrenamed."""

from __future__ import annotations

from zoscii_replikate.metrics import LABEL, ReplikateMetrics

# Labels Prometheus attaches to every scraped series itself; a target's own label of the
# same name is renamed exported_<name>, so a dashboard would have to know about that.
TARGET_LABELS = {"job", "instance"}


def test_no_metric_uses_a_label_prometheus_sets_itself() -> None:
    metrics = ReplikateMetrics()
    metrics.runs.labels("copy", "caught_up").inc()
    metrics.lag.labels("copy").set(0)
    families = list(metrics.registry.collect())
    assert families  # the loop below checks something
    for family in families:
        for sample in family.samples:
            assert not TARGET_LABELS & set(sample.labels), (family.name, sample.labels)
    runs = next(f for f in families if f.name == "zoscii_replikate_runs")
    assert runs.samples[0].labels == {LABEL: "copy", "outcome": "caught_up"}
    assert LABEL == "replication"
