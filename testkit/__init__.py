"""The test and benchmark rig: a local Kafka broker, worker processes, topic readers, the
stream demo, the chaos and outage runs. Not shipped: the wheel and the worker image hold
``miqps`` and ``streams`` only."""
