"""One Scrapy crawl of the simulated web, run in its own process (a Twisted reactor runs
once per process): ``python -m testkit.scrapy_spider CONFIG.json OUT.json``.

CONFIG holds ``proxy``, ``start_urls``, ``hosts`` (the allowed ones), ``depth`` (how many
links deep to follow), ``maps`` (a maps file, or null for a crawl without the add-on) and
``rewrite`` (``MIQPS_REWRITE_REQUESTS``). OUT gets, per item scraped, its URL and the URL
first requested for it (before redirects), the URLs discovered (requested, whether fetched
or filtered as duplicates) and the crawl's stats."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response


class SimWebSpider(scrapy.Spider):
    name = "simweb"

    def __init__(
        self,
        config: dict[str, Any],
        items: list[tuple[str, str]],
        discovered: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = config
        self.items = items
        self.discovered = discovered

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.config["start_urls"]:
            self.discovered.append(url)
            yield self._request(url)

    def _request(self, url: str) -> scrapy.Request:
        return scrapy.Request(url, callback=self.parse, meta={"proxy": self.config["proxy"]})

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        first_url = (response.meta.get("redirect_urls") or [response.url])[0]
        self.items.append((response.url, first_url))
        if response.meta.get("depth", 0) >= self.config["depth"]:
            return
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if urlsplit(url).hostname in self.config["hosts"]:
                self.discovered.append(url)
                yield self._request(url)


def crawl(config: dict[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "DEPTH_LIMIT": config["depth"],
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False,
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "DOWNLOAD_TIMEOUT": 10,
        "RETRY_TIMES": 3,
        "COOKIES_ENABLED": False,
        "LOG_INSTALL_ROOT_HANDLER": False,
    }
    if config["maps"]:
        settings["ADDONS"] = {"miqps.scrapy.Addon": 600}
        settings["MIQPS_MAPS"] = config["maps"]
        settings["MIQPS_REWRITE_REQUESTS"] = config.get("rewrite", False)
    items: list[tuple[str, str]] = []
    discovered: list[str] = []
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SimWebSpider)
    process.crawl(crawler, config=config, items=items, discovered=discovered)
    process.start()
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    return {
        "items": items,
        "discovered": discovered,
        "stats": {
            key: value for key, value in stats.items() if isinstance(value, int | float | str)
        },
    }


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text("utf-8"))
    Path(argv[1]).write_text(json.dumps(crawl(config)), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
