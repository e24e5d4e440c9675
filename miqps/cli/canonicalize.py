"""``miqps canonicalize``: print the canonical URL of each input line (or argument), or the
decision behind it as JSON."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from miqps.canonical import DEFAULT_CACHE_DOMAINS, Canonicalizer, StaticLayers
from miqps.cli.common import MAX_INVALID_MESSAGES, add_skip_invalid, load_maps
from miqps.maps import InvalidMap
from miqps.mapstore import IN_MEMORY_MAX_BYTES, default_index_path, index_maps_file
from miqps.urls import InvalidURL, parse

NAME = "canonicalize"
HELP = "print the canonical URL of each input"
OWN_PARSER = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--maps", type=Path, help="maps written by 'miqps learn'")
    add_skip_invalid(parser, "of --maps")
    parser.add_argument(
        "--maps-index",
        type=Path,
        metavar="DIR",
        help="index the maps on disk here (built once per version of the file) and read "
        f"each domain's map when its first URL comes; the default for maps over "
        f"{IN_MEMORY_MAX_BYTES >> 20} MiB, indexed in the user's cache folder",
    )
    parser.add_argument(
        "--maps-cache",
        type=int,
        default=DEFAULT_CACHE_DOMAINS,
        metavar="DOMAINS",
        help="with an index, how many domains' maps to hold in memory "
        f"(default {DEFAULT_CACHE_DOMAINS})",
    )
    parser.add_argument("--json", action="store_true", help="print the decision details")
    parser.add_argument(
        "--no-prior",
        action="store_true",
        help="do not drop utm_*/gclid/fbclid/msclkid in unlearned patterns",
    )
    parser.add_argument("urls", nargs="*", help="URLs; read from stdin when none are given")


def run(args: argparse.Namespace) -> int:
    import gc

    if args.maps_cache < 1:
        print("miqps canonicalize: --maps-cache must be at least 1", file=sys.stderr)
        return 2
    canonicalizer = _indexed(args) if _wants_index(args) else None
    if canonicalizer is None:
        if _wants_index(args):
            return 2
        canonicalizer = Canonicalizer(StaticLayers.default(), use_prior=not args.no_prior)
    if args.maps is not None and not canonicalizer.on_demand:
        gc.disable()  # loading makes many objects that all live on: collecting is wasted
        try:
            loaded = load_maps(args.maps, args.skip_invalid, "miqps canonicalize", "maps")
        finally:
            gc.enable()
        if loaded is None:
            return 2
        canonicalizer.load(loaded[0])
        gc.freeze()
    if canonicalizer.on_demand:
        # Maps read on demand are made and dropped all the time, and the cyclic collector
        # walked every map held each time (half the time of a mix of domains not held).
        # They hold no cycles: reference counting frees a dropped map.
        gc.disable()
    try:
        _write(canonicalizer, args)
    finally:
        canonicalizer.close()
    return 0


def _wants_index(args: argparse.Namespace) -> bool:
    if args.maps is None:
        return False
    if args.maps_index is not None:
        return True
    try:
        return bool(args.maps.stat().st_size > IN_MEMORY_MAX_BYTES)
    except OSError:
        return False  # reading it says why


def _indexed(args: argparse.Namespace) -> Canonicalizer | None:
    """A canonicalizer reading the maps of ``--maps`` on demand from their index (built
    first if the file changed since), or None, with a message on stderr."""
    command = "miqps canonicalize"
    skipped: list[InvalidMap] = []

    def skip(error: InvalidMap) -> None:
        skipped.append(error)
        if len(skipped) <= MAX_INVALID_MESSAGES:
            print(f"{command}: skipped: {error}", file=sys.stderr)

    def building(index: Path) -> None:
        size = args.maps.stat().st_size
        print(
            f"{command}: indexing {args.maps} ({size / 1e6:,.0f} MB) into {index}; "
            "runs on this version of the file then start at once",
            file=sys.stderr,
        )

    index = args.maps_index or default_index_path(args.maps)
    try:
        store = index_maps_file(
            args.maps, index, skip if args.skip_invalid else None, on_build=building
        )
    except InvalidMap as error:
        print(
            f"{command}: cannot read maps: {error}\n{command}: use --skip-invalid to "
            "skip such lines",
            file=sys.stderr,
        )
        return None
    except OSError as error:
        print(f"{command}: cannot index maps: {error}", file=sys.stderr)
        return None
    except Exception as error:  # RocksDB's own errors: a locked or unreadable index
        print(f"{command}: cannot open the maps index {index}: {error}", file=sys.stderr)
        return None
    if skipped:
        print(f"{command}: {args.maps}: {len(skipped)} invalid map lines skipped", file=sys.stderr)
    canonicalizer = Canonicalizer(
        StaticLayers.default(),
        use_prior=not args.no_prior,
        maps=store,
        cache_domains=args.maps_cache,
    )
    canonicalizer.adopt(store)
    return canonicalizer


def _write(canonicalizer: Canonicalizer, args: argparse.Namespace) -> None:
    if args.json:
        lines = (
            [url.rstrip("\r\n") for url in args.urls]
            if args.urls
            else (line for block, _ in _stdin_blocks() for line in block.split("\n"))
        )
        for decision in _decisions(canonicalizer, lines):
            sys.stdout.write(decision)
    else:
        outputs = (
            _canonical_urls(canonicalizer, [url.rstrip("\r\n") for url in args.urls])
            if args.urls
            else _canonical_blocks(canonicalizer, _stdin_blocks())
        )
        stdout = getattr(sys.stdout, "buffer", None)  # None: replaced by a text-only stream
        for output in outputs:
            if stdout is not None:
                stdout.write(output)
            else:
                sys.stdout.write(output.decode())
    sys.stdout.flush()


_BLOCK_BYTES = 1 << 20
# The bytes of a block of lines free of C0 control characters (but "\n") and DEL.
_CONTROL_FREE = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100)) + b"\n"


def _stdin_blocks() -> Iterator[tuple[str, bool]]:
    """Stdin in blocks of lines (``"\\n"`` between them, no line end after the last), each
    with ``True`` if free of control characters.

    Lines are what a UTF-8 text stream with universal newlines and ``surrogateescape``
    gives (``\\n``, ``\\r\\n`` and ``\\r`` end a line). Checking a whole block for control
    characters is one C call, instead of one check per line.
    """
    stdin = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
    carry = b""
    while True:
        chunk = stdin.read1(_BLOCK_BYTES)
        if not chunk:
            break
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        block, carry = data[:cut], data[cut + 1 :]
        if not block.translate(None, _CONTROL_FREE):  # so no "\r" either
            yield block.decode("utf-8", "surrogateescape"), True
        else:
            yield _decode_lines(data[: cut + 1]), False
    if carry:
        yield _decode_lines(carry), False


def _decode_lines(data: bytes) -> str:
    text = data.decode("utf-8", "surrogateescape")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.removesuffix("\n")


def _canonical_blocks(
    canonicalizer: Canonicalizer, blocks: Iterable[tuple[str, bool]]
) -> Iterator[bytes]:
    """The output for each block of lines: one line per input line, empty when invalid."""
    number = 0
    for block, control_free in blocks:
        errors: list[tuple[int, InvalidURL]] = []
        output = canonicalizer.canonical_block(block, errors, control_free=control_free)
        for index, error in errors:
            _report_invalid(number + index + 1, error)
        number += block.count("\n") + 1
        yield output


def _canonical_urls(canonicalizer: Canonicalizer, urls: list[str]) -> Iterator[bytes]:
    errors: list[tuple[int, InvalidURL]] = []
    outputs = canonicalizer.canonical_texts(urls, errors)
    for index, error in errors:
        _report_invalid(index + 1, error)
    if outputs:
        yield ("\n".join(outputs) + "\n").encode()


def _decisions(canonicalizer: Canonicalizer, lines: Iterable[str]) -> Iterator[str]:
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\r\n")
        try:
            decision = canonicalizer.decide(parse(text), original=text)
        except InvalidURL as error:
            _report_invalid(number, error)
            record = {"url": _as_unicode(text), "error": error.reason}
            yield json.dumps(record, ensure_ascii=False) + "\n"
            continue
        yield json.dumps(decision.to_json(), ensure_ascii=False) + "\n"


_SURROGATES = re.compile("[\ud800-\udfff]")


def _percent_encoded(match: re.Match[str]) -> str:
    char = match.group()
    try:  # a byte that was not UTF-8, as stdin and the arguments are read
        raw = char.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = char.encode("utf-8", "surrogatepass")
    return "".join(f"%{byte:02X}" for byte in raw)


def _as_unicode(text: str) -> str:
    """``text`` with the bytes that were not UTF-8 (lone surrogates once read) percent-encoded,
    as a URL carries bytes: JSON readers refuse lone surrogates."""
    return _SURROGATES.sub(_percent_encoded, text)


def _report_invalid(number: int, error: InvalidURL) -> None:
    print(f"line {number}: invalid URL: {error.reason}", file=sys.stderr)
