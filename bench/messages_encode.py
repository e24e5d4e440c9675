"""The cost of the typed records of ``streams.messages`` on the canonicalizer's hot path.

Writes one ``urls.canonical`` record per URL as the front did (a dict through orjson), by
building a :class:`streams.messages.CanonicalOutput` (a frozen dataclass) and by its
``encode`` (no record built), and
reads them back (orjson alone against ``CanonicalOutput.from_bytes``, which checks every
field). Prints records per second and the ratio to the dict baseline of the same run.

    .venv/bin/python -m bench.messages_encode [--records 200000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from streams.messages import CanonicalOutput


def rate(records: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return records / best


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.messages_encode")
    parser.add_argument("--records", type=int, default=200_000)
    count = parser.parse_args().records
    fields = [(f"https://shop{n % 500}.example/p/{n}?id={n}&utm_source=mail",
               f"https://shop{n % 500}.example/p/{n}?id={n}", f"shop{n % 500}.example",
               "/p/*?id&utm_source", ("id",), ("utm_source",), "learned", 3,
               {"crawl": n} if n % 2 else None) for n in range(count)]
    dumps = orjson.dumps

    def as_dicts() -> list[bytes]:
        return [dumps({"url": u, "canonical_url": c, "domain": d, "pattern": p, "kept": k,
                       "dropped": r, "status": s, "map_version": v, "meta": m})
                for u, c, d, p, k, r, s, v, m in fields]

    def as_records() -> list[bytes]:
        return [CanonicalOutput(*item).to_bytes() for item in fields]  # type: ignore[arg-type]

    def as_encoded() -> list[bytes]:
        encode = CanonicalOutput.encode
        return [encode(*item) for item in fields]  # type: ignore[arg-type]

    encoded = as_records()
    assert encoded == as_dicts() == as_encoded(), "every way must write the same bytes"
    write_dict, write_record = rate(count, as_dicts), rate(count, as_records)
    write_encoded = rate(count, as_encoded)
    read_json = rate(count, lambda: [orjson.loads(value) for value in encoded])
    read_record = rate(count, lambda: [CanonicalOutput.from_bytes(value) for value in encoded])
    print(f"write: dict {write_dict:,.0f}/s, CanonicalOutput {write_record:,.0f}/s, "
          f"ratio {write_record / write_dict:.2f}; CanonicalOutput.encode {write_encoded:,.0f}/s, "
          f"ratio {write_encoded / write_dict:.2f}")
    print(f"read:  orjson.loads {read_json:,.0f}/s, CanonicalOutput.from_bytes "
          f"{read_record:,.0f}/s, ratio {read_record / read_json:.2f}")


if __name__ == "__main__":
    main()
