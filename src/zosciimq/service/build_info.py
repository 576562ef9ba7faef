"""``zoscii_<service>_build_info``: which version of which service answers a scrape.

The usual Prometheus idiom (an Info metric, value 1, the facts as labels), one per
service, so a dashboard can tell an upgraded container from one left behind, and join
it onto the other series of the same target.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Info

from zosciimq.service.process import version


def register_build_info(registry: CollectorRegistry, service: str) -> Info:
    """``zoscii_<service>_build_info{version, python}`` in ``registry``."""
    info = Info(
        f"zoscii_{service}_build",
        f"The ZOSCII MQ {service} service's version and Python.",
        registry=registry,
    )
    info.info({"version": version(), "python": platform.python_version()})
    return info
