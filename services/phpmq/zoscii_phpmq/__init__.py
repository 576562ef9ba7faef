"""ZOSCII MQ phpmq: the PHPMQ protocol (TCP, php-mq/protocol) on this project's queues.

A small asyncio TCP server on the shared data directory that maps the PHPMQ messages
onto the core: 001 send -> ``QueueStore.publish_many``; 002 consume -> a consumer of the
queue's consumer group (``ConsumerGroups``) with a window of unacknowledged messages,
each dispatched as 003; 004/005/006 -> ack, requeue, dead letter. See README.md.
"""
