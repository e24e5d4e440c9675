"""Moved to :mod:`streams.messages`; this re-export keeps old imports working until every
call site has switched."""

from streams.messages import (
    BadInput,
    RawURL,
    Source,
    decode_input,
    encode_dead_letter,
)

__all__ = ["BadInput", "RawURL", "Source", "decode_input",
           "encode_dead_letter"]
