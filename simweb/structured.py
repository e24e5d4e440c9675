"""Structured data of a client-rendered item page: schema.org JSON-LD, microdata, and the
framework's data blob (Next.js ``__NEXT_DATA__`` or Nuxt's ``__NUXT_DATA__`` payload).

As on real sites, these carry echoes of the request: the JSON-LD ``url``/``@id`` hold the
requested URL with its tracking parameters, the blob repeats the request's query and path,
and a nonce, a render stamp and a list of recommendations (of changing length) in the blob
change on every fetch.
"""

from __future__ import annotations

import json
import random
import time
from html import escape
from typing import Any
from urllib.parse import urlsplit

from simweb.sites import Item, Site

JSON = dict[str, Any]


def product_offer(site: Site, item: Item, image: str, size: str, cents: int, currency: str) -> JSON:
    """The schema.org Product of an item page, without its echoed ``url`` and ``@id``."""
    sku = f"{item.sku}-{size.upper()}" if size else item.sku
    return {
        "@context": "https://schema.org",
        "@type": "Product",
        "name": item.name,
        "sku": item.sku,
        "image": [image],
        "brand": {"@type": "Brand", "name": item.brand.title()},
        "category": item.category,
        "offers": {
            "@type": "Offer",
            "sku": sku,
            "price": f"{cents / 100:.2f}",
            "priceCurrency": currency,
            "availability": "https://schema.org/InStock",
            "seller": {"@type": "Organization", "name": site.host},
        },
    }


def json_ld(product: JSON, request_url: str) -> str:
    echoed = {**product, "@id": request_url + "#product", "url": request_url}
    echoed["offers"] = {**product["offers"], "url": request_url}
    return f'<script type="application/ld+json">{_script_json(echoed)}</script>'


def microdata(product: JSON, request_url: str) -> str:
    offer = product["offers"]
    return (
        '<div itemscope itemtype="https://schema.org/Product">'
        f'<meta itemprop="name" content="{escape(product["name"])}">'
        f'<meta itemprop="sku" content="{escape(product["sku"])}">'
        f'<link itemprop="image" href="{escape(product["image"][0])}">'
        f'<link itemprop="url" href="{escape(request_url)}">'
        '<div itemprop="offers" itemscope itemtype="https://schema.org/Offer">'
        f'<meta itemprop="sku" content="{escape(offer["sku"])}">'
        f'<meta itemprop="price" content="{offer["price"]}">'
        f'<meta itemprop="priceCurrency" content="{offer["priceCurrency"]}">'
        '<link itemprop="availability" href="https://schema.org/InStock"></div></div>'
    )


def data_blob(
    kind: str,
    route_path: str,
    product: JSON,
    size: str,
    sizes: tuple[str, ...],
    request_url: str,
    query: dict[str, str],
    rng: random.Random,
    recommendations: list[JSON],
) -> str:
    """The framework's data script (``kind`` is "next" or "nuxt"), with the item and the
    ``recommendations`` of this fetch."""
    parts = urlsplit(request_url)
    as_path = parts.path + ("?" + parts.query if parts.query else "")
    offer = product["offers"]
    page_product = {
        "sku": product["sku"],
        "title": product["name"],
        "brand": product["brand"]["name"],
        "category": product["category"],
        "images": product["image"],
        "price": {"amount": offer["price"], "currency": offer["priceCurrency"]},
        "variantSku": offer["sku"],
        "sizes": list(sizes),
        "selectedSize": size or None,
    }
    nonce = f"{rng.getrandbits(96):024x}"
    rendered_at = f"{time.time():.6f}"
    if kind == "next":
        payload: JSON = {
            "props": {
                "pageProps": {
                    "product": page_product,
                    "recommendations": recommendations,
                    "renderedAt": rendered_at,
                    "_nonce": nonce,
                },
                "__N_SSP": True,
            },
            "page": route_path + "[sku]",
            "query": query,
            "buildId": f"{rng.getrandbits(64):016x}",
            "asPath": as_path,
            "isFallback": False,
            "gssp": True,
            "scriptLoader": [],
        }
        return (
            f'<script id="__NEXT_DATA__" type="application/json">{_script_json(payload)}</script>'
        )
    state: JSON = {
        "data": {f"product-{product['sku']}": page_product, "recommendations": recommendations},
        "state": {"$snonce": nonce, "renderedAt": rendered_at},
        "once": [],
        "_errors": {},
        "serverRendered": True,
        "path": as_path,
        "query": query,
    }
    flat = json.dumps(devalue(state), separators=(",", ":"), ensure_ascii=False)
    return (
        '<script type="application/json" data-nuxt-data="nuxt-app" data-ssr="true" '
        f'id="__NUXT_DATA__">{_script_safe(flat)}</script>'
    )


def devalue(value: Any) -> list[Any]:
    """Flatten ``value`` the way Nuxt's payload does: every object and list becomes an entry
    whose members are indexes of other entries; the root is wrapped as ``ShallowReactive``."""
    table: list[Any] = [["ShallowReactive", 1]]

    def add(node: Any) -> int:
        index = len(table)
        table.append(None)
        if isinstance(node, dict):
            table[index] = {key: add(member) for key, member in node.items()}
        elif isinstance(node, list):
            table[index] = [add(member) for member in node]
        else:
            table[index] = node
        return index

    add(value)
    return table


def _script_json(value: JSON) -> str:
    return _script_safe(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _script_safe(text: str) -> str:
    return text.replace("</", "<\\/")
