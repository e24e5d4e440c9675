import random

from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from streams.kafka.partitioning import key_partition, murmur2


def test_murmur2_matches_the_java_compatible_one_of_aiokafka() -> None:
    rng = random.Random(3)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", "dömain.example".encode()]
    keys += [rng.randbytes(rng.randrange(1, 64)) for _ in range(2000)]
    for key in keys:
        assert murmur2(key) & 0xFFFFFFFF == aiokafka_murmur2(key), key


def test_known_partitions_of_java_clients() -> None:
    assert murmur2(b"21") == -973932308
    assert key_partition(b"example.com", 12) == (73178361 % 12)


def test_java_test_vectors() -> None:
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
