"""ZOSCII MQ: a file-based message queue and data store spoken over HTTP.

``zosciimq.core`` is the on-disk format shared by every service (stdlib only);
``zosciimq.client`` and ``zosciimq.cli`` are for the people who talk to a server.
"""

__version__ = "1.0.0"
