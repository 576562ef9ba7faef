"""ZOSCII MQ zmq: a ZeroMQ gateway onto this project's queues.

zbroker's zpipes (durable named pipes, wire-compatible with its clients) and the ØMQ
request-reply, pipeline and publish-subscribe patterns, on the shared data directory,
through the core (``QueueStore``, ``ConsumerGroups``). See README.md.
"""
