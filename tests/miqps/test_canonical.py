from miqps.canonical import Canonicalizer, StaticLayers
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from miqps.urls import parse


def learned_map() -> DomainMap:
    params = {
        "id": ParamEvidence("keep", Layer.LEARNED, 1, 1, 0, 0),
        "utm_source": ParamEvidence("keep", Layer.LEARNED, 4, 4, 0, 0),
        "sid": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0),
        "variant": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0),
    }
    decision = PatternDecision(
        frozenset({"id", "utm_source"}), frozenset({"sid", "variant"}), params,
        Verification(2, 0, 0, []), "2026-12-02T00:00:00Z", 5,
    )
    return DomainMap("shop.example", 2, "2026-12-02T00:00:00Z",
                     {"/p?id&sid&utm_source&variant": decision})


def test_learned_pattern_keeps_only_kept_parameters_in_sorted_order() -> None:
    canon = Canonicalizer()
    canon.update(learned_map())
    url = parse("http://shop.example/p?sid=9&utm_source=a&id=4")
    assert canon.canonical_url(url) == "http://shop.example/p?id=4&sid=9&utm_source=a"
    url = parse("http://shop.example/p?sid=9&utm_source=a&id=4&variant=2")
    assert canon.canonical_url(url) == (
        "http://shop.example/p?id=4&utm_source=a&variant=2"
    ), "the allowlist keeps variant even though the map dropped it"


def test_unlearned_pattern_keeps_everything_but_the_cold_start_prior() -> None:
    canon = Canonicalizer()
    url = parse("http://other.example/p?gclid=1&utm_medium=x&ref=2")
    assert canon.canonical_url(url) == "http://other.example/p?ref=2"
    decision = canon.decide(url)
    assert decision.status == "provisional"
    assert decision.layers == {"gclid": "prior", "ref": "unlearned", "utm_medium": "prior"}


def test_prior_is_switchable() -> None:
    canon = Canonicalizer(use_prior=False)
    url = parse("http://other.example/p?gclid=1&ref=2")
    assert canon.canonical_url(url) == "http://other.example/p?gclid=1&ref=2"


def test_learned_evidence_wins_over_the_prior_in_unlearned_patterns() -> None:
    canon = Canonicalizer()
    canon.update(learned_map())
    url = parse("http://shop.example/p?id=4&utm_source=a&color=red")
    decision = canon.decide(url)
    assert decision.status == "provisional"
    assert "utm_source" in decision.kept, "this domain learned that utm_source changes pages"


def test_decide_reports_layers_and_map_version() -> None:
    canon = Canonicalizer(StaticLayers.default())
    canon.update(learned_map())
    decision = canon.decide(parse("http://shop.example/p?sid=9&utm_source=a&id=4&variant=1"))
    assert decision.status == "learned"
    assert decision.map_version == 2
    assert decision.layers == {
        "id": "learned", "sid": "learned", "utm_source": "learned", "variant": "allowlist",
    }
    assert decision.dropped == ("sid",)
