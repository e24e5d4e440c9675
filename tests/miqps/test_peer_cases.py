"""Every case of the peers' URL-normalization suites: our output names the input's resource
under WHATWG, and canonicalizing it again changes nothing (tests/data/README.md)."""

from __future__ import annotations

import base64
import json

import pytest

from miqps.canonical import Canonicalizer
from miqps.urls import InvalidURL, parse
from tests.data import PEER_URL_CASES
from tests.miqps.resource import resource_difference


def _inputs() -> list[tuple[str, str]]:
    cases = [json.loads(line) for line in PEER_URL_CASES.read_text(encoding="utf-8").splitlines()]
    return [
        (case["suite"], base64.b64decode(case["input_b64"]).decode("utf-8", "surrogateescape"))
        for case in cases
    ]


@pytest.mark.parametrize("use_prior", [True, False])
def test_peer_cases_keep_the_resource_and_are_idempotent(use_prior: bool) -> None:
    canon = Canonicalizer(use_prior=use_prior)
    inputs = _inputs()
    outputs = canon.canonical_texts([text for _, text in inputs])
    failures: list[str] = []
    checked = 0
    for (suite, text), output in zip(inputs, outputs, strict=True):
        try:
            decision = canon.decide(parse(text), original=text)
        except InvalidURL:
            assert output == "", (suite, text)
            continue
        checked += 1
        if decision.canonical_url != output:
            failures.append(f"{suite} {text!r}: plain {output!r}, JSON {decision.canonical_url!r}")
        difference = resource_difference(text, output, decision.dropped)
        if difference:
            failures.append(f"{suite} {text!r} -> {output!r}: {difference}")
        again = canon.canonical_texts([output])[0]
        if again != output:
            failures.append(f"{suite} {text!r}: {output!r} then {again!r}")
    assert failures == []
    assert checked > 550
