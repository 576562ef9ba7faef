"""ZOSCII MQ replikate: pull replication of queues from partner servers (PROTOCOL.md 4)."""
