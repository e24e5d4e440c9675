"""Whether msgspec could replace the JSON layer of :mod:`streams.messages` (the issue "Measure
msgspec for the records"), against the current code in the same run, on records made of the
simulated web's URLs:

- decoding the hot records: packs of pattern samples into the pattern-stats agent's
  :class:`~streams.messages.Observation` objects (by the hand-written reader the agent uses, by
  the typed records, by msgspec Structs for the whole pack or item by item, as the agent reads
  it), and ``urls.raw`` JSON envelopes (with orjson as today, or msgspec);
- encoding ``urls.canonical`` outputs, URL pattern samples and probe requests, each built from
  its fields and written: as today (orjson), by msgspec from the same frozen dataclasses, and
  by msgspec from Structs;
- whether msgspec writes the bytes the current code writes, record type by record type.

    .venv/bin/pip install msgspec   # for the measurement only: not a project dependency
    .venv/bin/python -m bench.msgspec_records [--urls 20000] [--pack-size 50] [--rounds 5]

It prints microseconds per record, the best of ``--rounds`` runs taken in turns, and each
figure's ratio to the current code's; rows in parentheses are parts, for scale. Without
msgspec it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import timeit
from collections.abc import Callable, Sequence
from dataclasses import fields
from types import GenericAlias
from typing import Annotated, Any, get_type_hints

import orjson

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from miqps.urls import InvalidURL, NormalizedURL, parse, split_pattern
from simweb.corpus import generate_corpus
from simweb.sites import build_sites
from streams.messages import (
    BadInput,
    CanonicalOutput,
    CountSample,
    DeadLetter,
    DueSample,
    MapUpdateRecord,
    MapVersion,
    Observation,
    ProbeRequest,
    RawURL,
    RequestedPattern,
    SamplePack,
    Source,
    UrlSample,
    decode_input,
    read_observation,
    read_sample_items,
    sample_to_bytes,
)
from streams.messages.records import JSON_STARTS, WHITESPACE

try:
    msgspec: Any = importlib.import_module("msgspec")
except ModuleNotFoundError:
    msgspec = None

MAX_BYTES = 1 << 20
AT = "2026-12-03T08:00:00Z"
Timed = dict[str, Callable[[], object]]


def corpus_urls(count: int) -> list[NormalizedURL]:
    sites = build_sites("tuning", 8)
    per_site = count // len(sites) + 1
    return [parse(entry.url) for entry in generate_corpus(sites, per_site, seed=3)][:count]


def dropped_names(url: NormalizedURL) -> set[str]:
    return {name for name in url.names if name.startswith(("utm_", "ref", "eid"))}


def outputs(urls: Sequence[NormalizedURL]) -> list[CanonicalOutput]:
    made = []
    for number, url in enumerate(urls):
        dropped = dropped_names(url)
        kept = set(url.names) - dropped
        meta = {"crawl": number, "depth": number % 4} if number % 10 == 0 else None
        made.append(
            CanonicalOutput(
                url.url,
                url.without(dropped),
                url.host,
                url.pattern,
                tuple(sorted(kept)),
                tuple(sorted(dropped)),
                "learned" if number % 3 else "provisional",
                number % 40 + 1,
                meta,
            )
        )
    return made


def samples(urls: Sequence[NormalizedURL]) -> list[UrlSample | CountSample | DueSample]:
    """Mostly URL samples, as the front sends them, with some counts and due ticks."""
    made: list[UrlSample | CountSample | DueSample] = []
    for number, url in enumerate(urls):
        basis = AT if number % 7 == 0 else ""
        if number % 20 == 0:
            made.append(DueSample(url.host, split_pattern(url.pattern)[0]))
        elif number % 6 == 0:
            made.append(CountSample(url.host, url.pattern, number % 9 + 1, basis))
        else:
            made.append(UrlSample(url.host, url.pattern, url.url, number % 5 + 1, basis))
    return made


def packs(items: list[UrlSample | CountSample | DueSample], size: int) -> list[bytes]:
    return [
        SamplePack.from_items([sample_to_bytes(sample) for sample in items[start : start + size]])
        for start in range(0, len(items), size)
    ]


def probe_requests(urls: Sequence[NormalizedURL]) -> list[ProbeRequest]:
    by_shape: dict[tuple[str, str], list[NormalizedURL]] = {}
    for url in urls:
        by_shape.setdefault((url.host, split_pattern(url.pattern)[0]), []).append(url)
    return [
        ProbeRequest(
            domain,
            shape,
            {
                url.pattern: RequestedPattern("enough-samples", "", 12 + number, 1.7e9 + number)
                for number, url in enumerate(group[:3])
            },
            tuple(url.url for url in group[:8]),
            1.7e9 + len(group) / 7,
        )
        for (domain, shape), group in by_shape.items()
    ]


def domain_map(domain: str, pattern: str) -> DomainMap:
    decision = PatternDecision(
        frozenset({"id"}),
        frozenset({"ref"}),
        {
            "id": ParamEvidence("keep", Layer.LEARNED, 6, 6, 0),
            "ref": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6),
        },
        Verification(3),
        AT,
    )
    return DomainMap(domain, 4, AT, {pattern: decision}, False)


def cold_records(urls: Sequence[NormalizedURL]) -> dict[str, list[Any]]:
    """Records of the other topics, only to compare their bytes."""
    evidence = {
        "id": ParamEvidence("keep", Layer.LEARNED, 6, 1, 5, 0, ["lang=en"]).to_json(),
        "ref": ParamEvidence("drop", Layer.LEARNED, 6, 5, 1).to_json(),
    }
    updates = [
        MapUpdateRecord(
            url.host,
            url.pattern,
            number % 2 == 0,
            "accepted",
            "enough-samples",
            number,
            number + 1,
            ("id",),
            ("ref",),
            ("id",),
            ("ref", "utm_source"),
            ("utm_source",),
            evidence,
            Verification(2, 0, 1, ["id"]).to_json(),
            number * 3,
            number % 11,
            AT,
        )
        for number, url in enumerate(urls[:200])
    ]
    source = Source("urls.raw", 3, 1234, 1_700_000_000_000)
    letters = [
        DeadLetter.of(
            "invalid URL", url.url.encode()[::-1], None, source, "canonicalize", 64, 1.7e9
        )
        for url in urls[:200]
    ]
    versions = [
        MapVersion(url.host, 4, "publish", "", AT, domain_map(url.host, url.pattern).to_json())
        for url in urls[:200]
    ]
    return {"map update": updates, "dead letter": letters, "map version": versions}


class Structs:
    """msgspec Structs with the fields (names, types, order) of the records, checking what the
    typed reader checks: exactly those fields, each of its type (a sample's domain not empty)."""

    def __init__(self) -> None:
        domain = Annotated[str, msgspec.Meta(min_length=1)]
        tagged = {"tag_field": "kind", "frozen": True, "forbid_unknown_fields": True}
        url = msgspec.defstruct(
            "UrlSample",
            [("domain", domain), ("pattern", str), ("url", str), ("count", int), ("basis", str)],
            tag="url",
            **tagged,
        )
        count = msgspec.defstruct(
            "CountSample",
            [("domain", domain), ("pattern", str), ("count", int), ("basis", str)],
            tag="count",
            **tagged,
        )
        due = msgspec.defstruct(
            "DueSample", [("domain", domain), ("shape", str)], tag="due", **tagged
        )
        self.sample_of_kind = {"url": url, "count": count, "due": due}
        self.sample = url | count | due
        self.canonical = struct_of(CanonicalOutput)
        self.requested = struct_of(RequestedPattern)
        self.request = struct_of(ProbeRequest, patterns=GenericAlias(dict, (str, self.requested)))

    def of_sample(self, sample: UrlSample | CountSample | DueSample) -> Any:
        return self.sample_of_kind[sample.kind](**values_of(sample))

    def of_request(self, request: ProbeRequest) -> Any:
        patterns = {
            key: self.requested(**values_of(item)) for key, item in request.patterns.items()
        }
        return self.request(**(values_of(request) | {"patterns": patterns}))


def struct_of(record_type: type, **retyped: Any) -> Any:
    hints = get_type_hints(record_type)
    return msgspec.defstruct(
        record_type.__name__,
        [(item.name, retyped.get(item.name, hints[item.name])) for item in fields(record_type)],
        frozen=True,
        forbid_unknown_fields=True,
    )


def values_of(record: Any) -> dict[str, Any]:
    return {item.name: getattr(record, item.name) for item in fields(record)}


def field_values(record: Any) -> tuple[Any, ...]:
    return tuple(getattr(record, item.name) for item in fields(record))


def observation_of(sample: Any) -> Observation:
    """The agent's Observation of a sample Struct, with the checks :func:`read_observation`
    makes beyond the types."""
    kind = type(sample).__name__
    if kind == "DueSample":
        shape, pattern, url, count, basis = sample.shape, "", None, 0, ""
    else:
        pattern, count, basis = sample.pattern, sample.count, sample.basis
        shape = split_pattern(pattern)[0]
        url = parse(sample.url) if kind == "UrlSample" else None
    if not shape.startswith("/"):
        raise BadInput("pattern sample without a domain and a pattern or shape")
    return Observation(sample.domain, shape, pattern, url, count, basis)


def observation_of_record(sample: UrlSample | CountSample | DueSample) -> Observation:
    if isinstance(sample, DueSample):
        return Observation(sample.domain, sample.shape, "", None, 0, "")
    url = parse(sample.url) if isinstance(sample, UrlSample) else None
    shape = split_pattern(sample.pattern)[0]
    return Observation(sample.domain, shape, sample.pattern, url, sample.count, sample.basis)


def pack_readers(structs: Structs) -> dict[str, Callable[[bytes], list[Observation]]]:
    """Ways to read a pack into Observations; the first is the agent's today."""
    whole = msgspec.json.Decoder(GenericAlias(list, structs.sample))
    raw_items = msgspec.json.Decoder(list[msgspec.Raw])
    item = msgspec.json.Decoder(structs.sample)
    bad_item = (msgspec.ValidationError, msgspec.DecodeError, BadInput, InvalidURL)

    def by_hand(value: bytes) -> list[Observation]:
        return [read_observation(entry) for entry in read_sample_items(value)]

    def typed(value: bytes) -> list[Observation]:
        return [observation_of_record(sample) for sample in SamplePack.from_bytes(value).samples]

    def msgspec_pack(value: bytes) -> list[Observation]:
        return [observation_of(sample) for sample in whole.decode(value)]

    def msgspec_items(value: bytes) -> list[Observation]:
        read = []
        for entry in raw_items.decode(value):
            try:
                read.append(observation_of(item.decode(entry)))
            except bad_item:
                continue
        return read

    return {
        "read_observation (today)": by_hand,
        "SamplePack.from_bytes (typed)": typed,
        "msgspec, the whole pack": msgspec_pack,
        "msgspec, item by item": msgspec_items,
    }


def msgspec_decode_input(value: bytes | None, max_bytes: int) -> RawURL:
    """:meth:`RawURL.from_bytes` as it is, but for msgspec reading the JSON envelope."""
    if value is None:
        raise BadInput("null value")
    size = len(value)
    if size > max_bytes:
        raise BadInput(f"message of {size} bytes is larger than the {max_bytes}-byte limit")
    meta: dict[str, Any] | None = None
    body = value
    if not body or body[0] in WHITESPACE or body[-1] in WHITESPACE:
        body = value.strip(WHITESPACE)
        if not body:
            raise BadInput("empty message")
    if body[0] in JSON_STARTS:
        try:
            document = msgspec.json.decode(body)
        except msgspec.DecodeError as error:
            raise BadInput(f"not valid JSON: {error}") from None
        if not isinstance(document, dict):
            raise BadInput(f'JSON {type(document).__name__} instead of an object with a "url"')
        url = document.get("url")
        if not isinstance(url, str):
            raise BadInput('JSON object without a "url" string')
        text = url.strip()
        meta = {key: item for key, item in document.items() if key != "url"} or None
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadInput(f"not valid UTF-8 (byte {error.start})") from None
    try:
        return RawURL(text, parse(text), meta)
    except InvalidURL as error:
        raise BadInput(f"invalid URL: {error.reason}") from None


def envelopes(urls: Sequence[NormalizedURL]) -> list[bytes]:
    """``urls.raw`` JSON envelopes: a URL and what the crawler carries along."""
    return [
        orjson.dumps({"url": url.url, "crawl": number, "depth": number % 4, "source": "feed"})
        for number, url in enumerate(urls)
    ]


def best_micros(variants: Timed, rounds: int) -> dict[str, float]:
    """Microseconds of each variant: the best of ``rounds`` runs taken in turns."""
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, work in variants.items():
            best[name] = min(best[name], timeit.timeit(work, number=1) * 1e6)
    return best


def over(read: Callable[[Any], object], values: Sequence[Any]) -> Callable[[], object]:
    return lambda: [read(value) for value in values]


def report(title: str, variants: Timed, count: int, unit: str, rounds: int) -> None:
    """Each variant's microseconds per ``unit`` and its ratio to the first's."""
    cost = best_micros(variants, rounds)
    baseline = next(iter(cost.values()))
    print(f"\n{title}")
    for name, micros in cost.items():
        print(f"  {name:<36} {micros / count:7.2f} µs/{unit}  {micros / baseline:5.2f}x")


def measure_decoding(
    urls: list[NormalizedURL], structs: Structs, pack_size: int, rounds: int
) -> None:
    items = samples(urls)
    messages = packs(items, pack_size)
    readers = pack_readers(structs)
    today = [readers["read_observation (today)"](value) for value in messages]
    for name, read in readers.items():
        assert [read(value) for value in messages] == today, f"{name} reads other observations"
    url_texts = [sample.url for sample in items if isinstance(sample, UrlSample)]
    report(
        f"decode: pattern-sample packs of {pack_size} into the agent's Observations",
        {name: over(read, messages) for name, read in readers.items()}
        | {
            "(orjson.loads alone)": over(orjson.loads, messages),
            "(msgspec decode alone)": over(
                msgspec.json.Decoder(GenericAlias(list, structs.sample)).decode, messages
            ),
            "(parse() of the sample URLs alone)": over(parse, url_texts),
        },
        len(items),
        "sample",
        rounds,
    )
    values = envelopes(urls)
    assert [decode_input(value, MAX_BYTES) for value in values] == [
        msgspec_decode_input(value, MAX_BYTES) for value in values
    ], "msgspec reads other inputs"
    report(
        "decode: urls.raw JSON envelopes (a URL as plain text has no JSON to replace)",
        {
            "decode_input (today)": over(lambda value: decode_input(value, MAX_BYTES), values),
            "msgspec for the envelope": over(
                lambda value: msgspec_decode_input(value, MAX_BYTES), values
            ),
            "(orjson.loads alone)": over(orjson.loads, values),
            "(msgspec decode alone)": over(msgspec.json.decode, values),
            "(parse() of the URLs alone)": over(parse, [url.url for url in urls]),
        },
        len(values),
        "input",
        rounds,
    )


def measure_encoding(urls: list[NormalizedURL], structs: Structs, rounds: int) -> None:
    """Each record built from its fields and written, as its producer does."""
    encode = msgspec.json.Encoder().encode
    canonical = [field_values(output) for output in outputs(urls)]
    report(
        "encode: urls.canonical outputs",
        {
            "CanonicalOutput.encode (today)": over(lambda f: CanonicalOutput.encode(*f), canonical),
            "msgspec, the dataclass": over(lambda f: encode(CanonicalOutput(*f)), canonical),
            "msgspec, a Struct": over(lambda f: encode(structs.canonical(*f)), canonical),
        },
        len(canonical),
        "record",
        rounds,
    )
    url_samples = [
        field_values(sample) for sample in samples(urls) if isinstance(sample, UrlSample)
    ]
    url_struct = structs.sample_of_kind["url"]
    report(
        "encode: URL pattern samples",
        {
            "sample_to_bytes (today)": over(lambda f: sample_to_bytes(UrlSample(*f)), url_samples),
            "(orjson, a dict, no record)": over(
                lambda f: orjson.dumps(
                    {
                        "kind": "url",
                        "domain": f[0],
                        "pattern": f[1],
                        "url": f[2],
                        "count": f[3],
                        "basis": f[4],
                    }
                ),
                url_samples,
            ),
            "msgspec, a tagged Struct": over(lambda f: encode(url_struct(*f)), url_samples),
        },
        len(url_samples),
        "record",
        rounds,
    )
    requests = [
        (
            r.domain,
            r.shape,
            {key: field_values(item) for key, item in r.patterns.items()},
            r.urls,
            r.requested_at,
        )
        for r in probe_requests(urls)
    ]

    def request(record: Callable[..., Any], pattern: Callable[..., Any], f: Any) -> Any:
        return record(f[0], f[1], {key: pattern(*item) for key, item in f[2].items()}, f[3], f[4])

    report(
        "encode: probe requests",
        {
            "ProbeRequest.to_bytes (today)": over(
                lambda f: request(ProbeRequest, RequestedPattern, f).to_bytes(), requests
            ),
            "msgspec, the dataclass": over(
                lambda f: encode(request(ProbeRequest, RequestedPattern, f)), requests
            ),
            "msgspec, a Struct": over(
                lambda f: encode(request(structs.request, structs.requested, f)), requests
            ),
        },
        len(requests),
        "record",
        rounds,
    )


def compare_bytes(urls: list[NormalizedURL], structs: Structs, pack_size: int) -> None:
    encode = msgspec.json.Encoder().encode
    canonical, items, requests = outputs(urls), samples(urls), probe_requests(urls)
    sample_packs = [
        SamplePack(tuple(items[start : start + pack_size]))
        for start in range(0, len(items), pack_size)
    ]
    checks: dict[str, tuple[Sequence[Any], Callable[[Any], bytes]]] = {
        "canonical output, dataclass": (canonical, encode),
        "canonical output, Struct": (
            canonical,
            lambda output: encode(structs.canonical(**values_of(output))),
        ),
        "pattern-sample pack, tagged Structs": (
            sample_packs,
            lambda pack: encode([structs.of_sample(sample) for sample in pack.samples]),
        ),
        "probe request, dataclass": (requests, encode),
        "probe request, Struct": (requests, lambda record: encode(structs.of_request(record))),
    }
    for name, cold in cold_records(urls).items():
        checks[f"{name}, dataclass"] = (cold, encode)
    print("\nbytes: msgspec against the current to_bytes, on the records above")
    for name, (records, theirs) in checks.items():
        differing = [record for record in records if record.to_bytes() != theirs(record)]
        verdict = "identical" if not differing else f"DIFFERENT in {len(differing)}"
        print(f"  {name:<36} {verdict} ({len(records)} records)")
    print("  and on an input envelope's meta, which the output carries on:")
    for envelope in (
        b'{"url":"http://a.example/?id=1","score":1e20}',
        b'{"url":"http://a.example/?id=1","score":1.5e-7}',
        b'{"url":"http://a.example/?id=1","id":18446744073709551616}',
    ):
        today = orjson.dumps(decode_input(envelope, MAX_BYTES).meta)
        with_msgspec = encode(msgspec_decode_input(envelope, MAX_BYTES).meta)
        verdict = "same" if today == with_msgspec else "differs"
        print(f"  {envelope.decode()}\n    today {today!r}, msgspec {with_msgspec!r}: {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="bench.msgspec_records", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--urls", type=int, default=20_000)
    parser.add_argument("--pack-size", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if msgspec is None:
        print(
            "bench.msgspec_records: msgspec is not installed, so nothing is measured; "
            "install it into the venv for the measurement only: .venv/bin/pip install msgspec",
            file=sys.stderr,
        )
        return 0
    print(f"msgspec {msgspec.__version__}, orjson {orjson.__version__}, {args.urls} URLs")
    urls = corpus_urls(args.urls)
    structs = Structs()
    measure_decoding(urls, structs, args.pack_size, args.rounds)
    measure_encoding(urls, structs, args.rounds)
    compare_bytes(urls, structs, args.pack_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
