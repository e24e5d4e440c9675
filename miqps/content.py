"""Content IDs: the item a person sees on a page, hashed with xxhash, blind to page noise.

A page becomes a *snapshot*: a set of *blocks*, each a 64-bit key naming where on the page
something is and the xxhash of what is there. The hash names the content alone, never its
place (a data leaf's path and a property's name are content; a DOM path is not), so the same
item in another template (a print view, an AMP page, an A/B layout with other wrappers and
classes) has the same blocks under other keys. Two snapshots are compared by what they hold:
a block is different unless the other holds the same at its key or, when the other has
nothing at its key, anywhere among its blocks left over (:func:`differing_paths`). What a
snapshot sees:

- **visible text**, grouped by the DOM path of its element (``body>main#p.product>h1``);
  scripts, styles, templates, ``noscript`` and hidden subtrees are skipped;
- **the item's images**: ``og:image``, ``twitter:image``, ``link rel=image_src``, and every
  ``img`` (``src``, ``srcset``, ``data-src``) and ``picture``/``source`` of the body, except
  1×1 and 0×0 pixels. An image is identified by its host and path: query strings (resizes,
  cache busters, tracking values echoed into pixels) and fragments are dropped;
- **structured data**: JSON-LD, ``application/json`` data blobs (``__NEXT_DATA__``,
  ``__NUXT_DATA__``), microdata ``itemprop`` values and RDFa/Open Graph ``property`` values,
  flattened to one block per leaf (``props.pageProps.product.offers[0].price``);
- **the state of variant controls**: which ``option`` is ``selected`` and which radio or
  checkbox ``input`` is ``checked``.

What it never sees, because it is an echo of the request rather than content: any other
attribute (link ``href``, hidden inputs, script URLs), the query string and fragment of any
URL-valued leaf (JSON-LD ``url`` and ``@id``, ``og:url``, ``asPath``, image URLs are compared
by host and path only, matrix parameters dropped), and data objects that mirror the request's
query (``"query": {"id": "42", "utm_source": "mail"}``).

Timestamps, nonces, rotating ads and carousels change blocks by themselves; they are not
guessed but *learned*: fetching the same URL again shows which blocks change on their own
(:class:`VolatilityModel`), by the keys where the difference sits, in each layout of a template
as it is seen. The content ID is the hash of the HTTP status and of what every non-volatile
block holds, in no particular place or order.

Some pages are evidence of nothing (:attr:`Snapshot.unjudgeable`): bot, consent and challenge
interstitials, client-side shells whose item is fetched by scripts, and pages over the parsing
caps (DOM depth, element count, data leaves). Block keys are chained hashes of the parent's
key and the element's label, so memory stays linear in the depth of the page.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qsl, unquote_plus, urlsplit

import orjson
import xxhash
from selectolax.lexbor import LexborHTMLParser, LexborNode

MAX_DEPTH = 256
# Parsing a document nested tens of thousands deep costs the HTML parser seconds to minutes:
# such a document is refused before parsing when an estimate of its nesting (opening tags
# less closing ones, void elements aside; an overestimate for sloppy HTML) goes past this.
MAX_ESTIMATED_DEPTH = 4096
# A body with more control bytes than this share is not an HTML page.
MAX_CONTROL_SHARE = 0.01
MAX_ELEMENTS = 150_000
MAX_DATA_LEAVES = 20_000
MAX_DATA_DEPTH = 64
# Below this many characters of visible text outside header, nav, footer and aside, with no
# structured data and no content image, a page with scripts is a client-side shell.
SHELL_TEXT_CHARS = 160
# Interstitials are small pages: markers in a long page are a page talking about them.
INTERSTITIAL_MAX_TEXT_CHARS = 6000

_SKIPPED_SELECTOR = "script, style, noscript, template, svg, iframe, [hidden]"
_DATA_SCRIPT_SELECTOR = 'script[type="application/ld+json"], script[type="application/json"]'
_CHROME_TAGS = frozenset(("header", "nav", "footer", "aside"))
_PIXEL_SIZES = frozenset(("0", "1", "0px", "1px"))
_QUERY_MIRROR_KEYS = frozenset(
    ("query", "searchparams", "search", "params", "queryparams", "querystring", "route")
)
_IMAGE_META = frozenset(
    ("og:image", "og:image:url", "og:image:secure_url", "twitter:image", "twitter:image:src")
)
_INTERSTITIAL_MARKERS = re.compile(
    r"checking your browser|checking if the site connection is secure|just a moment\.\.\."
    r"|verify(?:ing)? (?:that )?you are (?:a )?human|attention required|ray id:?\s*[0-9a-f]{6,}"
    r"|enable javascript and cookies to continue|ddos protection by|are you a robot"
    r"|unusual traffic from your|complete the security check|please complete the captcha"
    r"|pardon our interruption|press (?:&|and) hold|request unsuccessful\. incapsula"
    r"|access to this page has been denied|before you continue to|bot protection"
    r"|human verification|please wait while we verify",
    re.IGNORECASE,
)
_INTERSTITIAL_TITLES = re.compile(
    r"^\s*(?:just a moment|attention required|access denied|security check|are you a robot"
    r"|verify(?:ing)? you are human|please wait|one more step|checking your browser"
    r"|ddos-guard|before you continue|bot verification|human verification|captcha)",
    re.IGNORECASE,
)
_TITLE_KEY_LABEL = "title"


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: int
    final_url: str
    blocks: Mapping[int, int]
    canonical_hint: str | None = None
    redirects: int = 0
    unjudgeable: str | None = None


def packed_blocks(blocks: Mapping[int, int]) -> array[int]:
    """``blocks`` as one array of keys and digests interleaved: a page held for later (an
    archive's, an observation's) in a fraction of a dict's memory."""
    packed = array("Q")
    for key, digest in blocks.items():
        packed.append(key)
        packed.append(digest)
    return packed


def unpacked_blocks(packed: array[int]) -> dict[int, int]:
    """The blocks of :func:`packed_blocks`."""
    return dict(zip(packed[::2], packed[1::2], strict=True))


def page_document(snapshot: Snapshot) -> dict[str, Any]:
    """``snapshot`` as JSON: what a page gave, in the form a probe journal and an
    observation hold it (:func:`page_from_document` reads it back)."""
    return {
        "status": snapshot.status,
        "final_url": snapshot.final_url,
        "redirects": snapshot.redirects,
        "canonical_hint": snapshot.canonical_hint,
        "blocks": list(snapshot.blocks.items()),
    }


def page_from_document(page: object) -> Snapshot:
    """The snapshot of a :func:`page_document`; raises ValueError (or TypeError,
    KeyError) when ``page`` is not one."""
    if not isinstance(page, dict):
        raise ValueError("a page is a JSON object")
    status, final_url, redirects = page["status"], page["final_url"], page["redirects"]
    hint, pairs = page["canonical_hint"], page["blocks"]
    if not (
        _count(status)
        and isinstance(final_url, str)
        and _count(redirects)
        and (hint is None or isinstance(hint, str))
        and isinstance(pairs, list)
    ):
        raise ValueError("not a page: status, final_url, redirects or canonical_hint")
    blocks: dict[int, int] = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(map(_block_number, pair))):
            raise ValueError("not a page: each block is [key, digest], two 64-bit numbers")
        blocks[pair[0]] = pair[1]
    return Snapshot(status, final_url, blocks, hint, redirects)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _block_number(value: object) -> bool:
    return _count(value) and cast(int, value) < 1 << 64


def _chain(parent: int, label: str) -> int:
    return xxhash.xxh3_64_intdigest(label.encode("utf-8", "replace"), parent)


def block_key(path: str) -> int:
    """The key of the block at ``path``, labels joined by ``>``: ``body>main#p>h1``,
    ``body>main>img>@img``, ``head>meta>og:image``, ``data>#__NEXT_DATA__>.props.id``."""
    key = 0
    for label in path.split(">"):
        key = _chain(key, label)
    return key


_BODY_KEY = block_key("body")
_HEAD_META_KEY = block_key("head>meta")
_DATA_KEY = block_key("data")
_BYTES_KEY = block_key("#body")


def _node_label(tag: str, attributes: Mapping[str, str | None]) -> str:
    label = tag
    node_id = attributes.get("id")
    if node_id:
        label += "#" + node_id
    classes = attributes.get("class")
    if classes:
        label += "." + ".".join(sorted(classes.split()))
    return label


def resource(value: str) -> str:
    """A URL-valued string as host and path only (no scheme, query, fragment or matrix
    parameters); any other string unchanged."""
    if not value.startswith(("http://", "https://", "//", "/", "./", "../", "?")):
        return value
    if value.startswith("?"):
        return ""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return value
    path = "/".join(segment.partition(";")[0] for segment in parts.path.split("/"))
    return parts.netloc.lower().rpartition("@")[2] + path


def _srcset_urls(srcset: str) -> list[str]:
    return [candidate.split()[0] for candidate in srcset.split(",") if candidate.split()]


@dataclass(frozen=True, slots=True)
class Echoes:
    """What a page may echo of its request: the query string, and its values by name."""

    params: Mapping[str, frozenset[str]]
    queries: frozenset[str]

    @classmethod
    def of(cls, *urls: str) -> Echoes:
        params: dict[str, set[str]] = {}
        queries: set[str] = set()
        for url in urls:
            query = url.partition("?")[2].partition("#")[0]
            if not query:
                continue
            queries.update((query, unquote_plus(query)))
            for name, value in parse_qsl(query, keep_blank_values=True):
                params.setdefault(name, set()).add(value)
        return cls({name: frozenset(values) for name, values in params.items()}, frozenset(queries))


@dataclass(slots=True)
class _Page:
    """What a snapshot collects while it walks one document."""

    request: Echoes
    parts: dict[int, list[str]] = field(default_factory=dict)
    data_leaves: int = 0
    content_images: int = 0
    main_text: int = 0
    all_text: list[str] = field(default_factory=list)
    all_text_chars: int = 0
    title: str = ""

    def add(self, key: int, value: str, label: str = "") -> None:
        """Add ``value`` to the block at ``key``; ``label`` says what it is wherever it sits
        (a data leaf's path, a property's name), the same in every template."""
        values = self.parts.get(key)
        if values is None:
            self.parts[key] = [label, value]
        else:
            values.append(value)


def snapshot_html(
    status: int, final_url: str, body: bytes, redirects: int = 0, request_url: str = ""
) -> Snapshot:
    """The snapshot of an HTML page; ``request_url`` (and ``final_url``) name the query
    values the page may echo."""
    problem = _not_parsable(body)
    if problem is not None:
        return Snapshot(status, final_url, {}, None, redirects, problem)
    page = _Page(Echoes.of(request_url, final_url))
    tree = LexborHTMLParser(body)
    title = tree.css_first("title")
    if title is not None:
        title_text = " ".join(title.text(deep=True).split())
        page.add(block_key(_TITLE_KEY_LABEL), title_text, _TITLE_KEY_LABEL)
        page.all_text.append(title_text)
        page.title = title_text
    canonical = tree.css_first('link[rel="canonical"]')
    hint = canonical.attributes.get("href") if canonical is not None else None
    has_scripts = tree.css_first("script") is not None
    problem = _collect_head(tree, page) or _collect_data_scripts(tree, page)
    root = tree.body
    if problem is None and root is not None:
        for node in root.css(_SKIPPED_SELECTOR):
            node.decompose()
        problem = _collect_body(root, page)
    if problem is None:
        problem = _unjudgeable(status, page, has_scripts)
    blocks = {key: _digest("\x1f".join(values)) for key, values in page.parts.items()}
    return Snapshot(status, final_url, blocks, hint, redirects, problem)


_TAG = re.compile(rb"<(/?)([A-Za-z][A-Za-z0-9]*)")
_VOID_TAGS = frozenset(
    b"area base br col embed hr img input link meta param source track wbr".split()
)
_CONTROL_BYTES = bytes(range(9)) + bytes(range(14, 32))


def _not_parsable(body: bytes) -> str | None:
    """Why ``body`` is refused before parsing, if it is: binary data, or nesting so deep
    that parsing it would take the HTML parser too long."""
    if len(body) - len(body.translate(None, _CONTROL_BYTES)) > MAX_CONTROL_SHARE * len(body):
        return "not an HTML page: binary data"
    depth = 0
    for closing, name in _TAG.findall(body):
        if closing:
            depth = max(0, depth - 1)
        elif name.lower() not in _VOID_TAGS:
            depth += 1
            if depth > MAX_ESTIMATED_DEPTH:
                return f"DOM deeper than {MAX_DEPTH}"
    return None


def _digest(text: str) -> int:
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "replace"))


def _collect_head(tree: LexborHTMLParser, page: _Page) -> str | None:
    for node in tree.css("meta[property], meta[itemprop], meta[name], link[rel]"):
        attributes = node.attributes
        if node.tag == "link":
            rel = (attributes.get("rel") or "").lower().split()
            href = attributes.get("href")
            if "image_src" in rel and href:
                page.add(_chain(_HEAD_META_KEY, "image_src"), resource(href), "@img")
                page.content_images += 1
            continue
        name = (
            attributes.get("property") or attributes.get("itemprop") or attributes.get("name") or ""
        ).lower()
        content = attributes.get("content")
        if content is None or not _is_item_meta(name, attributes):
            continue
        page.add(_chain(_HEAD_META_KEY, name), resource(content), "meta:" + name)
        page.data_leaves += 1
        if name in _IMAGE_META:
            page.content_images += 1
    return None


def _is_item_meta(name: str, attributes: Mapping[str, str | None]) -> bool:
    """Open Graph, RDFa and microdata properties and the Twitter card describe the item;
    other named metas (viewport, csrf tokens, verification codes) do not."""
    if attributes.get("property") is not None or attributes.get("itemprop") is not None:
        return True
    return name.startswith("twitter:") or name == "description"


def _collect_data_scripts(tree: LexborHTMLParser, page: _Page) -> str | None:
    for index, node in enumerate(tree.css(_DATA_SCRIPT_SELECTOR)):
        attributes = node.attributes
        kind = (attributes.get("type") or "").lower()
        label = "#" + (attributes.get("id") or f"{kind}[{index}]")
        content_label = attributes.get("id") or kind
        try:
            data = orjson.loads(node.text(deep=True))
        except orjson.JSONDecodeError:
            continue
        if _is_devalue_payload(data):
            data = _revive(data)
        blob = _chain(_DATA_KEY, label)
        for path, value in _leaves(data, "", page.request, 0):
            page.data_leaves += 1
            if page.data_leaves > MAX_DATA_LEAVES:
                return f"more than {MAX_DATA_LEAVES} structured-data leaves"
            page.add(_chain(blob, path), value, content_label + path)
    return None


# In a devalue payload (Nuxt's __NUXT_DATA__): wrappers around the index of their value,
# and types whose arguments are literals.
_DEVALUE_WRAPPERS = frozenset(
    ("ShallowReactive", "Reactive", "Ref", "ShallowRef", "EmptyRef", "EmptyShallowRef", "NuxtError")
)
_DEVALUE_LITERALS = frozenset(("Date", "RegExp", "BigInt", "URL"))


def _is_devalue_payload(data: Any) -> bool:
    """A devalue payload is a flat array whose first element, the root, refers to the
    others by index: ``[["ShallowReactive", 1], {"data": 2, "query": 3}, ...]``."""
    if not isinstance(data, list) or len(data) < 2:
        return False
    root = data[0]
    if isinstance(root, list):
        return len(root) == 2 and root[0] in _DEVALUE_WRAPPERS and type(root[1]) is int
    return isinstance(root, dict) and all(type(v) is int for v in root.values())


def _revive(payload: list[Any]) -> Any:
    """The nested document a devalue payload stands for: indices into the array resolved,
    so that a value's place is its path, not its position in the array (which moves when
    an echoed query adds entries). Shared and cyclic references stop at the caps."""
    budget = [MAX_DATA_LEAVES]

    def value(index: Any, depth: int) -> Any:
        budget[0] -= 1
        if (
            type(index) is not int
            or not 0 <= index < len(payload)
            or depth > MAX_DATA_DEPTH
            or budget[0] < 0
        ):
            return None
        item = payload[index]
        if isinstance(item, dict):
            return {key: value(ref, depth + 1) for key, ref in item.items()}
        if isinstance(item, list):
            kind = item[0] if item and isinstance(item[0], str) else None
            if kind in _DEVALUE_WRAPPERS and len(item) == 2:
                return value(item[1], depth + 1)
            if kind in _DEVALUE_LITERALS:
                return " ".join(str(part) for part in item[1:])
            if kind in ("Set", "Map", "null"):
                return [value(ref, depth + 1) for ref in item[1:]]
            return [value(ref, depth + 1) for ref in item]
        return item

    return value(0, 0)


def _leaves(value: Any, path: str, request: Echoes, depth: int) -> Iterator[tuple[str, str]]:
    """``(path, value)`` for every scalar of a JSON document, URL values as host and path,
    the request's query string and objects that mirror it left out."""
    if depth > MAX_DATA_DEPTH:
        yield path, "<too deep>"
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and _mirrors_query(str(key), item, request):
                continue
            yield from _leaves(item, f"{path}.{key}", request, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]", request, depth + 1)
    elif isinstance(value, str):
        yield path, "" if value.lstrip("?") in request.queries else resource(value)
    else:
        yield path, orjson.dumps(value).decode()


def _mirrors_query(key: str, item: Mapping[str, Any], request: Echoes) -> bool:
    """An object holding every parameter of the request with its value, under a query-ish
    key (``query``: then also when the request has none) or with at least two of them, is
    the request's query repeated, not content."""
    params = request.params
    for name, values in params.items():
        echoed = item.get(name)
        if isinstance(echoed, list):
            if not {str(v) for v in echoed} & values:
                return False
        elif echoed is None or str(echoed) not in values:
            return False
    return len(params) >= 2 or key.lower() in _QUERY_MIRROR_KEYS


def _collect_body(root: LexborNode, page: _Page) -> str | None:
    """Visible text by DOM path, images, microdata and control state, in document order."""
    # Per element: its key, its depth, and whether it is page chrome (header, nav, ...).
    known: dict[int, tuple[int, int, bool]] = {root.mem_id: (_BODY_KEY, 0, False)}
    elements = 0
    for node in root.traverse(include_text=True):
        parent = node.parent
        if parent is None:
            continue
        parent_info = known.get(parent.mem_id)
        if parent_info is None:
            continue
        parent_key, depth, chrome = parent_info
        tag = node.tag
        if tag == "-text":
            text = node.text_content
            if text and not text.isspace():
                words = " ".join(text.split())
                page.add(parent_key, words)
                if not chrome:
                    page.main_text += len(words)
                if page.all_text_chars < INTERSTITIAL_MAX_TEXT_CHARS:
                    page.all_text.append(words)
                page.all_text_chars += len(words)
            continue
        if tag is None or tag.startswith("-"):
            continue
        elements += 1
        if elements > MAX_ELEMENTS:
            return f"more than {MAX_ELEMENTS} elements"
        if depth + 1 > MAX_DEPTH:
            return f"DOM deeper than {MAX_DEPTH}"
        attributes = node.attributes
        key = _chain(parent_key, _node_label(tag, attributes))
        in_chrome = chrome or tag in _CHROME_TAGS
        known[node.mem_id] = (key, depth + 1, in_chrome)
        _collect_element(tag, attributes, key, parent_key, in_chrome, page)
    return None


def _collect_element(
    tag: str,
    attributes: Mapping[str, str | None],
    key: int,
    parent_key: int,
    chrome: bool,
    page: _Page,
) -> None:
    if tag in ("img", "source"):
        if attributes.get("width") in _PIXEL_SIZES or attributes.get("height") in _PIXEL_SIZES:
            return
        urls = [attributes.get("src"), attributes.get("data-src")]
        urls.extend(_srcset_urls(attributes.get("srcset") or ""))
        images = sorted({resource(url) for url in urls if url})
        if images:
            page.add(_chain(key, "@img"), " ".join(images), "@img")
            if not chrome:
                page.content_images += 1
    elif tag == "option":
        if "selected" in attributes:
            page.add(_chain(parent_key, "@selected"), attributes.get("value") or "", "@selected")
    elif tag == "input":
        kind = (attributes.get("type") or "").lower()
        if kind in ("radio", "checkbox") and "checked" in attributes:
            name, value = attributes.get("name") or "", attributes.get("value") or "on"
            page.add(_chain(parent_key, "@checked"), f"{name}={value}", "@checked")
    prop = attributes.get("itemprop") or attributes.get("property")
    content = attributes.get("content")
    if prop and content is not None:
        page.add(_chain(key, "@" + prop), resource(content), "@" + prop)
        page.data_leaves += 1


def _unjudgeable(status: int, page: _Page, has_scripts: bool) -> str | None:
    if page.all_text_chars <= INTERSTITIAL_MAX_TEXT_CHARS:
        marker = _INTERSTITIAL_TITLES.search(page.title) or _INTERSTITIAL_MARKERS.search(
            " ".join(page.all_text)
        )
        if marker is not None:
            return f"interstitial (HTTP {status}, {marker.group(0)[:40]!r})"
    if (
        has_scripts
        and page.main_text < SHELL_TEXT_CHARS
        and not page.data_leaves
        and not page.content_images
    ):
        return "client-side shell: no data and almost no text"
    return None


def snapshot_of(
    status: int,
    final_url: str,
    body: bytes,
    content_type: str = "",
    redirects: int = 0,
    request_url: str = "",
) -> Snapshot:
    """The snapshot of any answer: an HTML page's (also when no content type is given),
    else one of the bytes."""
    if content_type and "html" not in content_type.lower():
        return snapshot_bytes(status, final_url, body, redirects)
    return snapshot_html(status, final_url, body, redirects, request_url)


def snapshot_bytes(status: int, final_url: str, body: bytes, redirects: int = 0) -> Snapshot:
    """A snapshot of a non-HTML body: one block, the hash of the bytes."""
    return Snapshot(
        status, final_url, {_BYTES_KEY: xxhash.xxh3_64_intdigest(body)}, None, redirects
    )


def differing_paths(a: Snapshot, b: Snapshot) -> set[int]:
    """The keys, of either snapshot, of the blocks whose content the other does not hold.

    A block is matched at its own key first. One whose key the other snapshot lacks (it sits
    where the other's layout has nothing) is then matched by content among the other's
    blocks whose keys this one lacks, one for one: the same item in another layout differs
    in no block, a block shown twice in one and once in the other differs once, and two
    blocks that swap places (the two sides of a comparison) still differ."""
    blocks_a, blocks_b = a.blocks, b.blocks
    only_a = [path for path, digest in blocks_a.items() if blocks_b.get(path) != digest]
    only_b = [path for path, digest in blocks_b.items() if blocks_a.get(path) != digest]
    moved_a = [path for path in only_a if path not in blocks_b]
    moved_b = [path for path in only_b if path not in blocks_a]
    if not moved_a or not moved_b:
        return {*only_a, *only_b}
    return {
        *(path for path in only_a if path in blocks_b),
        *_unmatched(moved_a, blocks_a, moved_b, blocks_b),
        *_unmatched(moved_b, blocks_b, moved_a, blocks_a),
    }


def _unmatched(
    paths: list[int], blocks: Mapping[int, int], other_paths: list[int], other: Mapping[int, int]
) -> Iterator[int]:
    left = Counter(other[path] for path in other_paths)
    for path in paths:
        digest = blocks[path]
        if left[digest] > 0:
            left[digest] -= 1
        else:
            yield path


def content_id(snapshot: Snapshot, volatile: Iterable[int] = ()) -> int:
    """The xxhash content ID of a snapshot: its status and what its blocks hold, wherever
    they sit, the given volatile blocks left out."""
    skip = frozenset(volatile)
    held = sorted(digest for path, digest in snapshot.blocks.items() if path not in skip)
    digest = xxhash.xxh3_64()
    digest.update(str(snapshot.status).encode())
    digest.update(array("Q", held).tobytes())
    return digest.intdigest()


@dataclass(slots=True)
class VolatilityModel:
    """Blocks seen changing between two fetches of the same URL, per page template.

    A template is a domain and a path shape: pages of one shape share their layouts, so
    noise learned on one page applies to its siblings, but never across templates where the
    same DOM path may hold real content. Noise is learned at the keys where it sits, in
    each layout of the template it is seen in: two fetches in two layouts differ only where
    their content does (:func:`differing_paths`).
    """

    volatile: dict[str, set[int]] = field(default_factory=dict)
    stable: dict[str, Counter[int]] = field(default_factory=dict)
    max_noisy_share: float = 0.5
    stable_after: int = 4

    def paths(self, template: str) -> set[int]:
        return self.volatile.setdefault(template, set())

    def learn(self, template: str, first: Snapshot, second: Snapshot) -> set[int]:
        """Learn from two fetches of one URL; returns the blocks that changed."""
        changing = differing_paths(first, second)
        self.paths(template).update(changing)
        self.stable.setdefault(template, Counter()).update(first.blocks.keys() - changing)
        return changing

    def stable_count(self, template: str, path: int) -> int:
        counts = self.stable.get(template)
        return counts[path] if counts else 0

    def known_stable(self, template: str, paths: Iterable[int]) -> bool:
        """True if at least two of ``paths`` were each seen unchanged across refetches
        ``stable_after`` times and never changing: a difference there is content, not
        noise. One is not enough, and neither are a few refetches: a block rotating among
        a few variants repeats by chance on some refetches, and taken for content it would
        make every page of the template look different without ever being refetched."""
        counts = self.stable.get(template)
        if not counts:
            return False
        noise = self.paths(template)
        stable = [p for p in paths if counts[p] >= self.stable_after and p not in noise]
        return len(stable) >= 2

    def too_noisy(self, template: str, snapshot: Snapshot) -> bool:
        """When most of a page changes by itself there is nothing stable to compare."""
        if not snapshot.blocks:
            return False
        noisy = len(self.paths(template) & snapshot.blocks.keys())
        return noisy / len(snapshot.blocks) > self.max_noisy_share
