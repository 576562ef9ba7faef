"""ZOSCII MQ live: waiting reads and streams of queues, thousands of readers on one event loop."""
