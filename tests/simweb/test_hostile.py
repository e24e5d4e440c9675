"""The hostile server's bombs are what they claim: valid gzip that inflates to the stated size."""

import gzip

import pytest

from simweb.hostile import MIB, gzip_bomb, gzip_once


def test_a_gzip_bomb_inflates_to_its_stated_size_of_zeros() -> None:
    bomb = gzip_bomb(3 * MIB)
    assert len(bomb) < 4096
    assert gzip.decompress(bomb) == bytes(3 * MIB)
    assert gzip.decompress(gzip.decompress(gzip_once(bomb))) == bytes(3 * MIB)


@pytest.mark.parametrize("size", [0, MIB + 1, -MIB])
def test_a_bomb_size_must_be_whole_mebibytes(size: int) -> None:
    with pytest.raises(ValueError, match="MiB"):
        gzip_bomb(size)
