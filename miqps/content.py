"""Content IDs: what a page shows, hashed with xxhash, blind to page noise.

A page becomes a *snapshot*: for each DOM path (``body>div#main.product>h1``) the hash of
the visible text under it. Attributes are never read, so tracking values echoed into link
hrefs, hidden inputs and script URLs cannot change a snapshot; scripts, styles and
templates are skipped. Timestamps, nonces, rotating recommendations and ads do change the
text, so they are not guessed but *learned*: fetching the same URL twice shows which paths
change by themselves (see :class:`VolatilityModel`). The content ID is the hash of the
HTTP status and every non-volatile block.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import xxhash
from selectolax.lexbor import LexborHTMLParser, LexborNode

_SKIPPED_SELECTOR = "script, style, noscript, template, svg, iframe, [hidden]"
_BODY_BLOCK = "#body"
_TITLE_BLOCK = "title"


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: int
    final_url: str
    blocks: Mapping[str, int]
    canonical_hint: str | None = None
    redirects: int = 0


def _node_label(node: LexborNode) -> str:
    tag = node.tag or "?"
    attributes = node.attributes
    label = tag
    node_id = attributes.get("id")
    if node_id:
        label += "#" + node_id
    classes = attributes.get("class")
    if classes:
        label += "." + ".".join(sorted(classes.split()))
    return label


def snapshot_html(status: int, final_url: str, body: bytes, redirects: int = 0) -> Snapshot:
    tree = LexborHTMLParser(body)
    texts: dict[str, list[str]] = {}
    title = tree.css_first("title")
    if title is not None:
        texts[_TITLE_BLOCK] = [" ".join(title.text(deep=True).split())]
    canonical = tree.css_first('link[rel="canonical"]')
    hint = canonical.attributes.get("href") if canonical is not None else None
    root = tree.body
    if root is not None:
        for node in root.css(_SKIPPED_SELECTOR):
            node.decompose()
        _collect(root, texts)
    blocks = {path: _text_digest("\x1f".join(parts)) for path, parts in texts.items()}
    return Snapshot(status, final_url, blocks, hint, redirects)


def _text_digest(text: str) -> int:
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "replace"))


def _collect(root: LexborNode, texts: dict[str, list[str]]) -> None:
    """Visible text grouped by the DOM path of its element, in document order."""
    paths = {root.mem_id: "body"}
    for node in root.traverse(include_text=True):
        parent = node.parent
        if parent is None:
            continue
        parent_path = paths.get(parent.mem_id)
        if parent_path is None:
            continue
        if node.tag == "-text":
            text = node.text_content
            if text and not text.isspace():
                texts.setdefault(parent_path, []).append(" ".join(text.split()))
        else:
            paths[node.mem_id] = parent_path + ">" + _node_label(node)


def snapshot_bytes(status: int, final_url: str, body: bytes, redirects: int = 0) -> Snapshot:
    """A snapshot of a non-HTML body: one block, the hash of the bytes."""
    return Snapshot(status, final_url, {_BODY_BLOCK: xxhash.xxh3_64_intdigest(body)}, None,
                    redirects)


def differing_paths(a: Snapshot, b: Snapshot) -> set[str]:
    blocks_a, blocks_b = a.blocks, b.blocks
    paths = {path for path, digest in blocks_a.items() if blocks_b.get(path) != digest}
    paths.update(path for path in blocks_b if path not in blocks_a)
    return paths


def content_id(snapshot: Snapshot, volatile: Iterable[str] = ()) -> int:
    """The xxhash content ID of a snapshot, ignoring the given volatile paths."""
    skip = frozenset(volatile)
    digest = xxhash.xxh3_64()
    digest.update(str(snapshot.status).encode())
    for path in sorted(snapshot.blocks):
        if path not in skip:
            digest.update(b"\x1e" + path.encode("utf-8", "replace"))
            digest.update(snapshot.blocks[path].to_bytes(8, "little"))
    return digest.intdigest()


@dataclass(slots=True)
class VolatilityModel:
    """Paths seen changing between two fetches of the same URL, per page template.

    A template is a domain and a path shape: pages of one shape share their layout, so
    noise learned on one page applies to its siblings, but never across layouts where the
    same DOM path may hold real content.
    """

    volatile: dict[str, set[str]] = field(default_factory=dict)
    stable: dict[str, Counter[str]] = field(default_factory=dict)
    max_noisy_share: float = 0.5
    stable_after: int = 2

    def paths(self, template: str) -> set[str]:
        return self.volatile.setdefault(template, set())

    def learn(self, template: str, first: Snapshot, second: Snapshot) -> None:
        changing = differing_paths(first, second)
        self.paths(template).update(changing)
        self.stable.setdefault(template, Counter()).update(first.blocks.keys() - changing)

    def known_stable(self, template: str, paths: Iterable[str]) -> bool:
        """True if at least two of ``paths`` were each seen unchanged across refetches
        ``stable_after`` times and never changing: a difference there is content, not
        noise. One is not enough: a rotating block (an ad among a few) can repeat by chance
        on the first refetches, and a single such path, taken for content, would make
        every page of the template look different without ever being refetched again."""
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
