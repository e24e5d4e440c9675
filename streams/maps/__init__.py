"""Maps in the stream: the live maps of a worker, following the compacted maps topic, publishing
with history, the operator's map commands, and the Scrapy add-on's Kafka side."""
