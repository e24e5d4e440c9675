"""Operating the stream: Prometheus metrics and the live dashboard, with its assets."""
