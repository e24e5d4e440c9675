"""A crawlable mode of the simulated web, for crawler tests such as the Scrapy add-on's.

The sites of :func:`build_crawl_sites` are those of :func:`simweb.sites.build_sites` with a
small catalogue and a host of their own (``crawl-`` + the host), so a crawl can reach all
of a site; the URL corpora of the families are untouched. :class:`CrawlWeb` serves them
with a block of links on every page, built like a real shop's: each item is linked from
many pages under the parameters sites add to links, so a crawl meets every page under
several URLs:

- items featured with ``utm_*`` campaigns, or one of the site's other tracking parameters
  (``ref=related``, ``mc=...``), or a session id;
- an item's colour/size variants, languages and pages, and a comparison with a related
  item: different pages, some of them linked with tracking parameters too;
- a listing in each sort order and its next page: different pages that list the same items.

The block is a function of the page shown (not of the URL asked for), so every URL of a
page gets the same HTML from it; its parameters are the site's own, with their roles, so
:func:`simweb.corpus.content_key_for` stays the ground truth.

Serve them for a crawler of your own (an HTTP proxy on loopback; start at each site's home
page, ``http://crawl-<host>/``)::

    python -m simweb.crawl [--family tuning] [--sites 3] [--seed 5] [--items 30] [--port 8898]
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from html import escape
from urllib.parse import urlencode

from simweb.render import kit
from simweb.resolve import Page
from simweb.server import SimWeb
from simweb.sites import FAMILIES, NoiseParam, PageKind, Role, Route, Site, build_sites
from simweb.vocab import CAMPAIGN_WORDS, REF_SOURCES, UTM_MEDIUMS, UTM_SOURCES

CRAWL_HOST_PREFIX = "crawl-"
FEATURED_ITEMS = 4
"""Items each page features with tracking or session parameters."""
VARIANT_LINKS = 3
"""Values of each variant or language parameter an item page links to."""


def build_crawl_sites(family: str, count: int, seed: int = 0, items: int = 30) -> list[Site]:
    """The sites of ``build_sites(family, count, seed)`` with only their first ``items``
    catalogue items, each on the host ``crawl-`` + its own."""
    if items < 1:
        raise ValueError("items must be >= 1")
    return [_small(site, items) for site in build_sites(family, count, seed)]


def _small(site: Site, items: int) -> Site:
    catalog = site.catalog
    lookup = {
        fmt: {key: idx for key, idx in table.items() if idx < items}
        for fmt, table in catalog.lookup.items()
    }
    small = replace(
        catalog,
        items=catalog.items[:items],
        lookup=lookup,
        cum_weights=catalog.cum_weights[:items],
    )
    return replace(site, host=CRAWL_HOST_PREFIX + site.host, catalog=small)


class CrawlWeb(SimWeb):
    """:class:`SimWeb` whose pages end with :func:`crawl_links`."""

    def document(
        self,
        site: Site,
        page: Page,
        main: str,
        echo: Sequence[tuple[str, str]],
        rng: random.Random,
        request_url: str,
    ) -> str:
        html = super().document(site, page, main, echo, rng, request_url)
        links = "".join(
            f'<li><a href="{escape(href)}">{escape(href)}</a></li>'
            for href in crawl_links(site, page)
        )
        return html.replace("</body>", f'<nav class="more"><ul>{links}</ul></nav></body>', 1)


def crawl_links(site: Site, page: Page) -> list[str]:
    """The site-relative links ``page`` adds for crawlers, the same on every fetch."""
    if page.kind is PageKind.NOT_FOUND:
        return []
    links = _LinkMaker(site, page)
    return [*links.featured(), *links.variants(), *links.compare(), *links.listings()]


class _LinkMaker:
    def __init__(self, site: Site, page: Page) -> None:
        self.site = site
        self.page = page
        self.kit = kit(site)
        self.rng = random.Random(f"crawl-links:{site.seed}:{page.key}")
        usable = [n for n in site.noise if not n.matrix]
        self.utm = [n for n in usable if n.name.startswith("utm_")][:3]
        self.tracking = [
            n for n in usable if n.role is Role.TRACKING and not n.name.startswith("utm_")
        ]
        self.sessions = [n for n in usable if n.role is Role.SESSION]

    def featured(self) -> list[str]:
        """Items linked with a campaign, a referrer or a session: duplicates of the plain
        item links the site's own pages carry."""
        count = min(FEATURED_ITEMS, len(self.site.catalog.items))
        chosen = self.rng.sample(range(len(self.site.catalog.items)), count)
        return [self._with(self.kit.item_href[idx], self._noise()) for idx in chosen]

    def variants(self) -> list[str]:
        """From an item's plain page, each of its other pages (variants, languages, pages),
        about half of them with a tracking parameter or a session id too."""
        page, route = self.page, self.page.route
        if page.kind is not PageKind.ITEM or page.values or route is None:
            return []
        if route is not _item_route(self.site):
            return []
        href = self.kit.item_href[page.item]
        item = self.site.catalog.items[page.item]
        links = []
        for param in route.params:
            if param.matrix or param.name in route.key:
                continue
            if param.role in (Role.VARIANT, Role.DEFAULTED):
                values: Sequence[str] = self.rng.sample(
                    param.values, min(VARIANT_LINKS, len(param.values))
                )
            elif param.role is Role.PAGINATION and param.attr == "pages":
                last = min(item.pages, VARIANT_LINKS + 1)
                values = [str(int(param.default) + n * param.step) for n in range(1, last)]
            else:
                continue
            for value in values:
                pairs = [(param.name, value)]
                if self.rng.random() < 0.5:
                    pairs += self._noise()
                links.append(self._with(href, pairs))
        return links

    def compare(self) -> list[str]:
        """From an item's plain page, its comparison with a related item."""
        page = self.page
        if page.kind is not PageKind.ITEM or page.values:
            return []
        route = next((r for r in self.site.routes if r.kind is PageKind.COMPARE), None)
        if route is None or route.rare or route.hang or not route.key:
            return []
        first, second = route.param(route.key[0]), route.second
        if first is None or second is None:
            return []
        items = self.site.catalog.items
        other = items[self.rng.randrange(len(items))]
        pairs = [
            (first.name, items[page.item].key(first.attr)),
            (second.name, other.key(second.attr)),
            *self._noise(),
        ]
        return [self._with(route.path, pairs)]

    def listings(self) -> list[str]:
        """From the home page and plain listings, a category listing in every sort order
        and its next page."""
        page = self.page
        if page.kind not in (PageKind.HOME, PageKind.LISTING) or page.values:
            return []
        categories = self.site.catalog.categories
        href = self.kit.listing_href[categories[self.rng.randrange(len(categories))]]
        route = next(
            (r for r in self.site.routes if r.kind is PageKind.LISTING and href.startswith(r.path)),
            None,
        )
        if route is None:
            return []
        links: list[str] = []
        for param in route.params:
            if param.matrix:
                continue
            if param.role is Role.SORT:
                links.extend(self._with(href, [(param.name, value)]) for value in param.values)
            elif param.role is Role.PAGINATION:
                next_page = str(int(param.default or "1") + param.step)
                links.append(self._with(href, [(param.name, next_page), *self._noise()]))
        return links

    def _noise(self) -> list[tuple[str, str]]:
        """A campaign's ``utm_*`` set, one other tracking parameter or a session id."""
        kinds = [[self.utm]] if self.utm else []
        kinds += [[[n] for n in group] for group in (self.tracking, self.sessions) if group]
        if not kinds:
            return []
        chosen = self.rng.choice(self.rng.choice(kinds))
        return [(n.name, self._value(n)) for n in chosen]

    def _value(self, noise: NoiseParam) -> str:
        pick = self.rng.choice
        if noise.style == "source":
            return pick(UTM_SOURCES)
        if noise.style == "medium":
            return pick(UTM_MEDIUMS)
        if noise.style == "campaign":
            return f"{pick(CAMPAIGN_WORDS)}_{self.rng.randint(1, 40)}"
        if noise.style == "ref":
            return pick(REF_SOURCES)
        return f"{self.rng.getrandbits(64):016x}"

    @staticmethod
    def _with(href: str, pairs: list[tuple[str, str]]) -> str:
        if not pairs:
            return href
        return href + ("&" if "?" in href else "?") + urlencode(pairs)


def _item_route(site: Site) -> Route | None:
    """The route the site links its items on (as :mod:`simweb.render` does)."""
    return next(
        (r for r in site.routes if r.kind is PageKind.ITEM and not r.rare and not r.hang), None
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simweb.crawl",
        description="Serve the crawlable sites of the simulated web as an HTTP proxy on "
        "loopback, until interrupted. Crawl from each site's home page (printed) through "
        "the proxy; bench.scrapy_crawl uses the same sites with its defaults.",
    )
    parser.add_argument("--family", choices=FAMILIES, default="tuning")
    parser.add_argument("--sites", type=int, default=3, help="how many sites (default 3)")
    parser.add_argument("--seed", type=int, default=5, help="site seed (default 5)")
    parser.add_argument(
        "--items", type=int, default=30, help="catalogue items per site (default 30)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8898, help="proxy port (0: any free one)")
    parser.add_argument(
        "--rate-limit", type=float, default=0.0, help="requests/s per host, 0: unlimited"
    )
    parser.add_argument(
        "--interstitials",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="answer some requests of the sites that have them with challenge pages",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sites = build_crawl_sites(args.family, args.sites, args.seed, args.items)
    except ValueError as error:
        print(f"python -m simweb.crawl: {error}", file=sys.stderr)
        return 2
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, frame: done.set())
    web = CrawlWeb(
        sites,
        args.host,
        args.port,
        rate_limit_per_second=args.rate_limit,
        flaky_rate=0.0,
        seed=args.seed,
        interstitials=args.interstitials,
    )
    with web:
        print(f"simweb.crawl: proxy {web.proxy_url}; start URLs:", flush=True)
        for site in sites:
            print(f"http://{site.host}/", flush=True)
        while not done.wait(0.5):
            pass
    print("simweb.crawl stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
