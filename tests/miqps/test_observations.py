"""Observations: a crawler's pages read as what a probe of their URLs would have given."""

from __future__ import annotations

import orjson
import pytest

from miqps.content import page_document, snapshot_of
from miqps.observations import (
    InvalidObservation,
    Observation,
    ObservedPages,
    RecalledPages,
    RestoredPages,
    observation_record,
    read_observation,
)

PAGE = (
    b"<html><head><title>Item 7</title></head><body><main><h1>Item 7</h1>"
    b"<p>Description of item 7.</p></main><footer>Shop</footer></body></html>"
)
URL = "http://shop.test/p?id=7&ref=mail"
CAP = 1 << 20


def record(**fields: object) -> bytes:
    return orjson.dumps({"url": URL, "status": 200, **fields})


def test_a_page_reads_as_a_probe_would_have_seen_it_in_either_form() -> None:
    probed = snapshot_of(200, URL, PAGE, "text/html; charset=utf-8", 0, URL)
    sent_whole = read_observation(
        record(body=PAGE.decode(), content_type="text/html; charset=utf-8"), max_bytes=CAP
    )
    sent_reduced = read_observation(
        observation_record(URL, 200, PAGE, content_type="text/html"), max_bytes=CAP
    )
    for observation in (sent_whole, sent_reduced):
        assert observation.url == "http://shop.test/p?id=7&ref=mail"
        assert observation.host == "shop.test"
        assert observation.snapshot is not None and observation.unjudgeable is None
        assert observation.snapshot.blocks == probed.blocks
        assert observation.snapshot.status == 200 and observation.fetches == 1


def test_a_redirect_is_the_page_it_landed_on() -> None:
    landed = "https://shop.test/p?id=7"
    observation = read_observation(record(final_url=landed, body=PAGE.decode()), max_bytes=CAP)
    assert observation.snapshot is not None
    assert observation.snapshot.final_url == landed
    assert observation.snapshot.redirects == 1 and observation.fetches == 2
    pages = ObservedPages(10)
    assert pages.add(observation)
    outcome = pages.observed(URL)
    assert outcome is not None and outcome.snapshot is not None
    assert outcome.snapshot.final_url == landed and outcome.fetches == 2


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"status": 503, "body": "<html><body>maintenance</body></html>"}, "HTTP 503"),
        ({"status": 429, "body": "<html><body>slow down</body></html>"}, "HTTP 429"),
        (
            {"body": "<html><head><title>Just a moment...</title></head><body></body></html>"},
            "interstitial",
        ),
        ({"body": "x" * (CAP + 1)}, "body over the cap"),
    ],
)
def test_what_a_probe_would_find_inconclusive_is_no_evidence(
    fields: dict[str, object], why: str
) -> None:
    observation = read_observation(record(**fields), max_bytes=CAP)
    assert observation.snapshot is None
    assert observation.unjudgeable is not None and why in observation.unjudgeable
    pages = ObservedPages(10)
    assert not pages.add(observation)
    assert not pages.holds(URL)


def test_an_unjudgeable_page_sent_reduced_stays_unjudgeable() -> None:
    wall = b"<html><head><title>Just a moment...</title></head><body></body></html>"
    observation = read_observation(observation_record(URL, 200, wall), max_bytes=CAP)
    assert observation.snapshot is None and observation.unjudgeable is not None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "an empty observation"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "a JSON object"),
        (orjson.dumps({"status": 200, "body": ""}), "url is a URL"),
        (orjson.dumps({"url": "not a url", "status": 200, "body": ""}), "url is not a URL"),
        (record(status=99, body=""), "HTTP status"),
        (record(status=True, body=""), "HTTP status"),
        (record(final_url="http://[::1/", body=""), "final_url is not a URL"),
        (record(redirects=-1, body=""), "redirects is a count"),
        (record(), "a body or a page"),
        (record(body=7), "strings"),
        (record(page={"status": 200}), "not a page"),
        (record(page={**page_document(snapshot_of(200, URL, PAGE)), "blocks": [[1]]}), "block"),
        (record(page={**page_document(snapshot_of(200, URL, PAGE)), "blocks": [[-1, 2]]}), "block"),
        (record(status=404, page=page_document(snapshot_of(200, URL, PAGE))), "another status"),
    ],
)
def test_a_record_that_is_not_an_observation_says_why(value: bytes, reason: str) -> None:
    with pytest.raises(InvalidObservation) as caught:
        read_observation(value, max_bytes=CAP)
    assert reason in caught.value.reason
    assert "\n" not in caught.value.reason


def test_the_pages_held_are_bounded_and_the_latest_observation_of_a_url_stands() -> None:
    pages = ObservedPages(3)
    for item in range(5):
        url = f"http://shop.test/p?id={item}"
        body = PAGE.replace(b"7", str(item).encode())
        assert pages.add(read_observation(observation_record(url, 200, body), max_bytes=CAP))
    assert len(pages) == 3
    assert not pages.holds("http://shop.test/p?id=0") and not pages.holds("http://shop.test/p?id=1")
    assert pages.observed("http://shop.test/p?id=2") is not None  # used: kept the longest
    pages.add(
        read_observation(observation_record("http://shop.test/p?id=9", 200, PAGE), max_bytes=CAP)
    )
    assert pages.holds("http://shop.test/p?id=2") and not pages.holds("http://shop.test/p?id=3")
    down = orjson.dumps({"url": "http://shop.test/p?id=2", "status": 503, "body": "down"})
    assert not pages.add(read_observation(down, max_bytes=CAP))
    assert not pages.holds("http://shop.test/p?id=2")  # no longer what the URL gives


def observed(item: int, text: str = "", status: int = 200) -> Observation:
    """An observation of item ``item``'s URL; ``text`` tells two observations of it apart."""
    url = f"http://shop.test/p?id={item}"
    body = PAGE.replace(b"Description", f"{text} Description".encode())
    return read_observation(observation_record(url, status, body), max_bytes=CAP)


def page_text(pages: ObservedPages, item: int) -> str:
    outcome = pages.observed(f"http://shop.test/p?id={item}")
    assert outcome is not None and outcome.snapshot is not None
    return repr(outcome.snapshot.blocks)


def test_a_restore_keeps_the_latest_observation_of_each_url_under_the_bound() -> None:
    restored = RestoredPages(2, max_pages=3)
    for item in range(5):
        assert restored.add(observed(item, "old"))
    assert restored.add(observed(3, "new"))  # observed again: the latest, kept the longest
    assert not restored.add(observed(4, status=503))  # no longer what the URL gives
    restored.invalid()
    assert list(restored.pages) == [f"http://shop.test/p?id={n}" for n in (2, 3)]
    assert restored.by_outcome == {"kept": 6, "no evidence": 1, "invalid": 1}
    assert restored.records == 8

    pages = ObservedPages(3)
    assert pages.add(observed(9), source=0)
    pages.restoring(2)
    assert pages.restored(restored) == 2
    assert len(pages) == 3 and pages.held(2) == 2 and pages.held(0) == 1
    newest, oldest = ObservedPages(1), ObservedPages(1)
    newest.add(observed(3, "new"))
    oldest.add(observed(3, "old"))
    assert page_text(pages, 3) == page_text(newest, 3) != page_text(oldest, 3)


def test_what_is_observed_during_a_restore_stands_over_what_it_reads_again() -> None:
    restored = RestoredPages(1, max_pages=10)
    for item in range(3):
        restored.add(observed(item, "older"))
    pages = ObservedPages(10)
    pages.restoring(1)
    pages.add(observed(0, "newer"), source=1)  # read live while the restore ran
    pages.add(observed(1, status=503), source=1)  # no evidence now: the older page is not
    assert pages.restored(restored) == 1
    assert pages.holds("http://shop.test/p?id=2") and not pages.holds("http://shop.test/p?id=1")
    newer = ObservedPages(1)
    newer.add(observed(0, "newer"))
    assert page_text(pages, 0) == page_text(newer, 0)
    # The next restore of the partition notes nothing from before it.
    pages.restoring(1)
    again = RestoredPages(1, max_pages=10)
    again.add(observed(0, "older"))
    assert pages.restored(again) == 1


def test_a_source_given_up_has_its_pages_dropped_and_its_restore_merges_nothing() -> None:
    pages = ObservedPages(10)
    for item in range(4):
        pages.add(observed(item), source=item % 2)
    pages.restoring(1)
    restored = RestoredPages(1, max_pages=10)
    restored.add(observed(7))
    assert pages.give_up(1) == 2
    assert pages.restored(restored) == 0  # given up while it ran
    assert len(pages) == 2 and pages.held(0) == 2 and not pages.holds("http://shop.test/p?id=7")
    pages.restoring(0)
    pages.abandon(0)  # a restore that failed
    failed = RestoredPages(0, max_pages=10)
    failed.add(observed(8))
    assert pages.restored(failed) == 0 and not pages.holds("http://shop.test/p?id=8")


def test_the_urls_of_a_pattern_follow_the_pages_held_the_latest_observed_first() -> None:
    """Every way a page comes or goes (observed, observed again, no evidence now, over the
    bound, restored, given up) shows in the URLs of its pattern, and only there."""

    def of(pattern_url: str) -> Observation:
        return read_observation(observation_record(pattern_url, 200, PAGE), max_bytes=CAP)

    pages = ObservedPages(4)
    for item in range(3):
        pages.add(of(f"http://shop.test/p?id={item}"), source=0)
    pages.add(of("http://shop.test/p?id=5&ref=mail"), source=1)
    pages.add(of("http://other.test/p?id=1"), source=1)  # over the bound: id=0 goes
    assert pages.urls_of("shop.test", "/p?id", 10) == [
        "http://shop.test/p?id=2",
        "http://shop.test/p?id=1",
    ]
    assert pages.urls_of("shop.test", "/p?id", 1) == ["http://shop.test/p?id=2"]
    assert pages.urls_of("shop.test", "/p?id&ref", 10) == ["http://shop.test/p?id=5&ref=mail"]
    assert pages.urls_of("other.test", "/p?id", 10) == ["http://other.test/p?id=1"]
    assert pages.urls_of("shop.test", "/q?id", 10) == []

    pages.add(of("http://shop.test/p?id=1"), source=0)  # observed again: the latest
    down = orjson.dumps({"url": "http://shop.test/p?id=2", "status": 503, "body": "down"})
    pages.add(read_observation(down, max_bytes=CAP), source=0)
    assert pages.urls_of("shop.test", "/p?id", 10) == ["http://shop.test/p?id=1"]

    assert pages.give_up(1) == 2
    assert pages.urls_of("shop.test", "/p?id&ref", 10) == []
    assert pages.urls_of("other.test", "/p?id", 10) == []

    pages.restoring(1)
    restored = RestoredPages(1, max_pages=10)
    for item in range(7, 10):
        restored.add(of(f"http://shop.test/p?id={item}"))
    assert pages.restored(restored) == 3
    assert len(pages) == 4
    assert pages.urls_of("shop.test", "/p?id", 10) == [
        f"http://shop.test/p?id={item}" for item in (9, 8, 7, 1)
    ]


def test_recalled_pages_serve_for_their_age_under_the_bound() -> None:
    now = [0.0]
    recalled = RecalledPages(max_pages=2, max_age=60.0, clock=lambda: now[0])
    page = snapshot_of(200, URL, PAGE, "text/html", 0, URL)
    other = "http://shop.test/p?id=7"
    recalled.keep([(URL, page)])
    now[0] = 30.0
    recalled.keep([(other, page), ("http://shop.test/p?id=8", page)])
    assert not recalled.holds(URL)  # the oldest went first, over the bound
    assert recalled.holds(other) and len(recalled) == 2
    outcome = recalled.observed(other)
    assert outcome is not None and outcome.snapshot is not None
    assert outcome.snapshot.blocks == page.blocks and outcome.fetches == 1
    assert recalled.served == 1
    now[0] = 90.0
    assert recalled.holds(other)
    now[0] = 90.5
    assert not recalled.holds(other) and recalled.observed(other) is None
    assert len(recalled) == 0 and recalled.served == 1
