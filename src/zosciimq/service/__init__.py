"""What every ZOSCII MQ service shares at its edges: one way to log, one way to fail on a
bad setting, one way to start and stop, and the operations HTTP port.

Every service imports this; nothing here knows the data directory's format (that is
``zosciimq.core``) or any one service's business.
"""

from zosciimq.service.build_info import register_build_info
from zosciimq.service.logs import setup_logging
from zosciimq.service.ops import Health, OpsServer, ops_app
from zosciimq.service.process import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    StopSignal,
    settings_or_exit,
    version,
)

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_OK",
    "Health",
    "OpsServer",
    "StopSignal",
    "ops_app",
    "register_build_info",
    "settings_or_exit",
    "setup_logging",
    "version",
]
