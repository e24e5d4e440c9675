"""Maps in the stream: the live maps of a worker, following the compacted maps topic, publishing
with history (which the operator's commands of :mod:`streams.cli.maps` use too), and the Scrapy
add-on's Kafka side."""
