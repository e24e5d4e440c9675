"""The Kafka stream processor over the :mod:`miqps` core (the ``streams`` extra).

Its one public name is ``miqps.from_kafka`` (:func:`streams.maps.follow.from_kafka`): a
:class:`miqps.Canonicalizer` following the compacted maps topic live."""
