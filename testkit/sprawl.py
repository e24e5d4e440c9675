"""A crawl with parameter sprawl, and maps that learned most of its patterns: product,
category and search pages of about 60 shops, most URLs carrying tracking, click-id,
referral or session parameters drawn from small pools, so one page is reached under many
URLs (``bench.report`` and the report's browser tests)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from miqps.urls import path_shape

STAMP = "2026-01-01T00:00:00Z"
SITES = 60
ITEMS_PER_SITE = 400
_WORDS = (
    "kettle",
    "lamp",
    "chair",
    "boots",
    "jacket",
    "mug",
    "desk",
    "rug",
    "bag",
    "clock",
    "tent",
    "bike",
    "pan",
    "sofa",
    "shelf",
    "vase",
    "scarf",
    "watch",
    "radio",
    "kite",
)
_KINDS = (("/p/{word}-{item}", ("id",)), ("/c/{word}", ("page", "sort")), ("/search", ("q",)))
_NOISE_BUNDLES = (
    (),
    (),
    ("utm_source", "utm_medium", "utm_campaign"),
    ("gclid",),
    ("fbclid",),
    ("ref",),
    ("sid",),
    ("utm_source", "ref"),
)


def _values(rng: random.Random) -> dict[str, tuple[str, ...]]:
    """Each parameter's pool of values: small pools make many URLs per page."""
    hex_ids = tuple(f"{rng.getrandbits(48):012x}" for _ in range(60))
    return {
        "page": tuple(str(n) for n in range(1, 6)),
        "sort": ("relevance", "price", "newest"),
        "q": _WORDS,
        "utm_source": ("mail", "ads", "social", "partner"),
        "utm_medium": ("cpc", "email", "banner"),
        "utm_campaign": tuple(f"spring{n}" for n in range(8)),
        "gclid": hex_ids,
        "fbclid": hex_ids,
        "ref": ("home", "nav", "related", "footer", "search"),
        "sid": tuple(f"{rng.getrandbits(32):08x}" for _ in range(300)),
    }


@dataclass
class _Site:
    host: str
    ref_is_content: bool
    patterns: dict[str, tuple[frozenset[str], frozenset[str]]]


def sprawl_corpus(count: int, seed: int = 11) -> tuple[list[str], list[DomainMap]]:
    """``count`` URLs and the maps of their sites (nine in ten patterns learned; on one site
    in five ``ref`` picks content and is kept)."""
    rng = random.Random(seed)
    values = _values(rng)
    sites = [
        _Site(f"{rng.choice(_WORDS)}-shop{number}.example", number % 5 == 0, {})
        for number in range(SITES)
    ]
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(SITES)]
    urls: list[str] = []
    for site in rng.choices(sites, weights=weights, k=count):
        template, content = rng.choice(_KINDS)
        item = rng.randrange(ITEMS_PER_SITE)
        path = template.format(word=_WORDS[item % len(_WORDS)], item=item)
        noise = rng.choice(_NOISE_BUNDLES)
        pairs = [
            f"id={item}" if name == "id" else f"{name}={rng.choice(values[name])}"
            for name in content
        ]
        pairs += [f"{name}={rng.choice(values[name])}" for name in noise]
        rng.shuffle(pairs)
        urls.append(f"https://{site.host}{path}?{'&'.join(pairs)}")
        kept = frozenset(content) | (
            frozenset({"ref"}) & frozenset(noise) if site.ref_is_content else frozenset()
        )
        names = frozenset(content) | frozenset(noise)
        site.patterns.setdefault(
            path_shape(path) + "?" + "&".join(sorted(names)), (kept, names - kept)
        )
    return urls, [_site_map(site, rng) for site in sites]


def _site_map(site: _Site, rng: random.Random) -> DomainMap:
    decisions: dict[str, PatternDecision] = {}
    for key, (kept, dropped) in sorted(site.patterns.items()):
        if rng.random() < 0.1:
            continue
        params: dict[str, ParamEvidence] = {}
        for name in kept | dropped:
            samples = rng.randrange(3, 7)
            inconclusive = rng.randrange(2)
            changed = samples if name in kept else 0
            params[name] = ParamEvidence(
                "keep" if name in kept else "drop",
                Layer.LEARNED,
                samples,
                changed,
                samples - changed,
                inconclusive,
                ["page=1"] if name == "page" else [],
            )
        decisions[key] = PatternDecision(
            kept,
            dropped,
            params,
            Verification(2, 0, rng.randrange(2), []),
            STAMP,
            rng.randrange(20, 400),
        )
    return DomainMap(site.host, rng.randrange(1, 9), STAMP, decisions)
