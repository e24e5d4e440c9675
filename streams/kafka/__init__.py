"""The Kafka side of every component: confluent-kafka clients and topic administration, the
partitioner, Faust topics and tables, and rate-limited client logs."""
