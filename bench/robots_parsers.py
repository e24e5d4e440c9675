"""robots.txt parsers compared: Protego (what the fetcher uses) and the standard library's
``urllib.robotparser``, on RFC 9309 cases and on parse and lookup speed.

    python -m bench.robots_parsers [--rules 2000] [--repeat 5]

Prints, per parser, how many of the RFC cases it answers as RFC 9309 says, and the time to
parse a large robots.txt and to answer 10,000 lookups, as ratios to the standard library
measured in the same run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from urllib.robotparser import RobotFileParser

from protego import Protego

AGENT = "miqps"

# (what RFC 9309 says, robots.txt, URL, allowed?)
RFC_CASES: list[tuple[str, str, str, bool]] = [
    (
        "the longest match wins, whatever the order (2.2.2)",
        "User-agent: *\nDisallow: /shop\nAllow: /shop/catalog\n",
        "https://a.example/shop/catalog/1",
        True,
    ),
    (
        "Allow wins a tie of equal length (2.2.2)",
        "User-agent: *\nDisallow: /page\nAllow: /page\n",
        "https://a.example/page",
        True,
    ),
    (
        "'*' matches any characters (2.2.3)",
        "User-agent: *\nDisallow: /*/private\n",
        "https://a.example/users/private",
        False,
    ),
    (
        "'$' anchors the end of the path (2.2.3)",
        "User-agent: *\nDisallow: /*.pdf$\n",
        "https://a.example/files/report.pdf",
        False,
    ),
    (
        "'$' does not match a longer path (2.2.3)",
        "User-agent: *\nDisallow: /*.pdf$\n",
        "https://a.example/files/report.pdf.html",
        True,
    ),
    (
        "the product token matches case-insensitively (2.2.1)",
        "User-agent: MIQPS\nDisallow: /\n\nUser-agent: *\nAllow: /\n",
        "https://a.example/p",
        False,
    ),
    (
        "groups for the same agent are combined (2.2.1)",
        "User-agent: miqps\nDisallow: /a\n\nUser-agent: other\nDisallow: /\n\n"
        "User-agent: miqps\nDisallow: /b\n",
        "https://a.example/b",
        False,
    ),
    (
        "percent-encoded and plain characters are equal (2.2.2)",
        "User-agent: *\nDisallow: /%7Eadmin\n",
        "https://a.example/~admin/x",
        False,
    ),
    (
        "rules match the query too (2.2.2)",
        "User-agent: *\nDisallow: /*?sessionid=\n",
        "https://a.example/p?sessionid=1",
        False,
    ),
    (
        "a specific group replaces '*' (2.2.1)",
        "User-agent: *\nDisallow: /\n\nUser-agent: miqps\nDisallow: /admin\n",
        "https://a.example/p",
        True,
    ),
]


def protego_allows(text: str, url: str) -> bool:
    return bool(Protego.parse(text).can_fetch(url, AGENT))


def stdlib_allows(text: str, url: str) -> bool:
    parser = RobotFileParser()
    parser.parse(text.splitlines())
    return parser.can_fetch(AGENT, url)


def large_robots(rules: int) -> str:
    lines = ["User-agent: *", "Crawl-delay: 1"]
    for n in range(rules):
        lines.append(f"Disallow: /section{n}/private/")
        lines.append(f"Allow: /section{n}/public/")
    lines += ["", "User-agent: miqps", "Disallow: /staff/"]
    return "\n".join(lines) + "\n"


def best_of(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=2000, help="Allow/Disallow pairs")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    checkers = {"protego": protego_allows, "urllib.robotparser": stdlib_allows}
    print("| RFC 9309 case | expected | protego | urllib.robotparser |")
    print("|---|---|---|---|")
    right = dict.fromkeys(checkers, 0)
    for what, text, url, allowed in RFC_CASES:
        answers = {name: check(text, url) for name, check in checkers.items()}
        for name, answer in answers.items():
            right[name] += answer == allowed
        cells = " | ".join("allow" if answers[name] else "disallow" for name in checkers)
        print(f"| {what} | {'allow' if allowed else 'disallow'} | {cells} |")
    print()

    text = large_robots(args.rules)
    urls = [f"https://a.example/section{n % args.rules}/public/item?id={n}" for n in range(10_000)]
    stdlib = RobotFileParser()
    protego = Protego.parse(text)
    parse_stdlib = best_of(args.repeat, lambda: stdlib.parse(text.splitlines()))
    parse_protego = best_of(args.repeat, lambda: Protego.parse(text))
    stdlib.parse(text.splitlines())
    lookup_stdlib = best_of(args.repeat, lambda: [stdlib.can_fetch(AGENT, u) for u in urls])
    lookup_protego = best_of(args.repeat, lambda: [protego.can_fetch(u, AGENT) for u in urls])
    size = len(text.encode()) / 1024
    print(f"robots.txt of {2 * args.rules + 5} lines ({size:.0f} KiB), 10,000 lookups")
    print(
        "| parser | RFC cases right | parse (ms) | 10,000 lookups (ms) | parse / stdlib "
        "| lookups / stdlib |"
    )
    print("|---|---|---|---|---|---|")
    for name, parse_s, lookup_s in (
        ("protego", parse_protego, lookup_protego),
        ("urllib.robotparser", parse_stdlib, lookup_stdlib),
    ):
        print(
            f"| {name} | {right[name]}/{len(RFC_CASES)} | {parse_s * 1000:.1f} | "
            f"{lookup_s * 1000:.1f} | {parse_s / parse_stdlib:.2f}× | "
            f"{lookup_s / lookup_stdlib:.2f}× |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
