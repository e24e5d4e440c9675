"""Exports: each format against its real consumer (varnishd) or its published grammar."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from miqps.cli import main
from miqps.export import HOST_WIDE, export, neutral_scopes
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps

HOST = "shop.test"
STAMP = "2026-01-01T00:00:00Z"


def _decision(kept: dict[str, list[str]], dropped: dict[str, Layer]) -> PatternDecision:
    """A pattern keeping ``kept`` (name -> default values) and dropping ``dropped``."""
    params = {
        name: ParamEvidence("keep", Layer.LEARNED, 3, 3, 0, 0, defaults)
        for name, defaults in kept.items()
    }
    params.update(
        {name: ParamEvidence("drop", layer, 3, 0, 3, 0) for name, layer in dropped.items()}
    )
    return PatternDecision(
        frozenset(kept),
        frozenset(dropped),
        params,
        Verification(3, 0, 0),
        "2026-01-01T00:00:00Z",
        10,
    )


def shop_map() -> DomainMap:
    learned = Layer.LEARNED
    return DomainMap(
        HOST,
        4,
        STAMP,
        {
            # utm_source is neutral everywhere it was learned; ref under /item and /p only.
            "/p/*?id&ref&utm_source": _decision(
                {"id": []}, {"ref": learned, "utm_source": Layer.DOMAIN}
            ),
            "/p/*?id&ref": _decision({"id": []}, {"ref": Layer.VERIFICATION}),
            "/item/*?ref&sku": _decision({"sku": []}, {"ref": learned}),
            # ref picks the listing under /pages: "/p" as a prefix must not drop it there.
            "/pages?ref": _decision({"ref": []}, {}),
            "/search?page&q&ref&utm_source": _decision(
                {"q": [], "ref": [], "page": ["page=1"]}, {"utm_source": learned}
            ),
            # Dropped by the cold-start prior or an allowlisted name: not learned as neutral.
            "/?gclid": _decision({}, {"gclid": Layer.PRIOR}),
            "/cart?variant&x": _decision({"x": []}, {"variant": learned}),
        },
    )


def test_scopes_hold_only_what_every_learned_pattern_dropped_as_neutral() -> None:
    scopes = {scope.segment: scope for scope in neutral_scopes(shop_map())}
    assert scopes[HOST_WIDE].names == ("utm_source",)
    assert scopes["p"].names == ("ref",)
    assert scopes["item"].names == ("ref",)
    assert "pages" not in scopes and "search" not in scopes
    # page is learned only under /search, where 1 is its confirmed default.
    assert scopes[HOST_WIDE].default_pairs == ("page=1",)
    everything = {name for scope in scopes.values() for name in scope.names}
    assert not everything & {"gclid", "variant", "id", "sku", "q", "x"}


def _run_export(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    maps: list[DomainMap] | None = None,
) -> str:
    path = tmp_path / "maps.jsonl"
    write_maps(path, maps or [shop_map()])
    assert main(["export", "--maps", str(path), "--format", fmt]) == 0
    return capsys.readouterr().out


# Yandex Webmaster help, "The Clean-param directive": ``Clean-param: p0[&p1&..&pn] [path]``,
# at most 500 characters, the path a prefix of the characters A-Za-z0-9.-/*_.
CLEAN_PARAM = re.compile(
    r"Clean-param: [A-Za-z0-9._-]+(?:&[A-Za-z0-9._-]+)*(?: /[A-Za-z0-9.\-/*_]*)?"
)


def test_clean_param_follows_the_grammar_and_scopes_by_safe_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _run_export(tmp_path, capsys, "clean-param")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "User-agent: Yandex"
    for line in lines[1:]:
        assert CLEAN_PARAM.fullmatch(line) and len(line) <= 500, line
    assert lines[1:] == ["Clean-param: utm_source", "Clean-param: ref /item"]


def test_clean_param_splits_long_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = {f"tracking_parameter_{i:03}": Layer.LEARNED for i in range(60)}
    wide = DomainMap("wide.test", 1, STAMP, {"/x?" + "&".join(sorted(names)): _decision({}, names)})
    lines = [
        line
        for line in _run_export(tmp_path, capsys, "clean-param", [wide]).splitlines()
        if line.startswith("Clean-param")
    ]
    assert len(lines) > 1
    assert all(CLEAN_PARAM.fullmatch(line) and len(line) <= 500 for line in lines)
    assert sorted(n for line in lines for n in line.split()[1].split("&")) == sorted(names)


# duplicate-url-discarder README, "Rules": a list of objects with ``order``, ``urlPattern``
# (url-matcher include/exclude lists), ``processor`` and its ``args``.
DUD_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["order", "urlPattern", "processor"],
        "additionalProperties": False,
        "properties": {
            "order": {"type": "integer"},
            "processor": {
                "enum": ["queryRemoval", "queryRemovalExcept", "normalizer", "subpathRemoval"]
            },
            "args": {"type": "array", "items": {"type": "string"}},
            "urlPattern": {
                "type": "object",
                "additionalProperties": False,
                "required": ["include"],
                "properties": {
                    "include": {"type": "array", "items": {"type": "string"}},
                    "exclude": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}


def test_dud_rules_match_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = json.loads(_run_export(tmp_path, capsys, "dud-rules"))
    Draft202012Validator(DUD_SCHEMA).validate(rules)
    assert len({rule["order"] for rule in rules}) == len(rules)
    removal = {tuple(rule["urlPattern"]["include"]): rule["args"] for rule in rules}
    # url-matcher: "host/" is that host alone (a bare "host" would take in its subdomains);
    # "host/p|" the path /p exactly, "host/p/" below it (a bare "host/p" covers /pages).
    assert removal == {
        (f"{HOST}/",): ["utm_source"],
        (f"{HOST}/item|", f"{HOST}/item/"): ["ref", "utm_source"],
        (f"{HOST}/p|", f"{HOST}/p/"): ["ref", "utm_source"],
    }


# Cloudflare Rulesets API, rule ``rulesets_SetCacheSettingsRule`` (the parts this export uses).
CLOUDFLARE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "phase", "rules"],
    "properties": {
        "name": {"type": "string"},
        "kind": {"const": "zone"},
        "phase": {"const": "http_request_cache_settings"},
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["expression", "action", "action_parameters"],
                "properties": {
                    "description": {"type": "string"},
                    "enabled": {"type": "boolean"},
                    "expression": {"type": "string", "minLength": 1},
                    "action": {"const": "set_cache_settings"},
                    "action_parameters": {
                        "type": "object",
                        "properties": {
                            "cache": {"type": "boolean"},
                            "cache_key": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "custom_key": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {
                                            "query_string": {"$ref": "#/$defs/query_string"}
                                        },
                                    }
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    "$defs": {
        "query_string": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "exclude": {"$ref": "#/$defs/names"},
                "include": {"$ref": "#/$defs/names"},
            },
        },
        "names": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "list": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "all": {"type": "boolean"},
            },
        },
    },
}
# The Rules language: fields, "string literals", and/or, eq, starts_with(field, literal).
CLOUDFLARE_TERM = (
    r'(?:http\.host|http\.request\.uri\.path) eq "(?:[^"\\]|\\.)*"'
    r'|starts_with\(http\.request\.uri\.path, "(?:[^"\\]|\\.)*"\)'
)


def test_cloudflare_rules_match_the_schema_and_a_path_rule_repeats_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_run_export(tmp_path, capsys, "cloudflare"))
    Draft202012Validator(CLOUDFLARE_SCHEMA).validate(document)
    excluded = {}
    for rule in document["rules"]:
        expression = rule["expression"]
        bare = re.sub(CLOUDFLARE_TERM, "T", expression)
        assert re.fullmatch(r"\(T(?: and \(T(?: or T)*\))?\)", bare), expression
        excluded[expression] = rule["action_parameters"]["cache_key"]["custom_key"]["query_string"][
            "exclude"
        ]["list"]
    assert excluded['(http.host eq "shop.test")'] == ["utm_source"]
    path_rule = (
        '(http.host eq "shop.test" and (http.request.uri.path eq "/p" or '
        'starts_with(http.request.uri.path, "/p/")))'
    )
    assert excluded[path_rule] == ["ref", "utm_source"]


# ClearURLs documentation, "Rules" specification: providers by name, each with a
# ``urlPattern`` regular expression and lists of regular expressions.
CLEARURLS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["providers"],
    "additionalProperties": False,
    "properties": {
        "providers": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["urlPattern"],
                "additionalProperties": False,
                "properties": {
                    "urlPattern": {"type": "string", "format": "regex"},
                    "completeProvider": {"type": "boolean"},
                    "forceRedirection": {"type": "boolean"},
                    **{
                        key: {"type": "array", "items": {"type": "string", "format": "regex"}}
                        for key in (
                            "rules",
                            "rawRules",
                            "referralMarketing",
                            "exceptions",
                            "redirections",
                        )
                    },
                },
            },
        }
    },
}


def _clearurls_clean(providers: dict[str, Any], url: str) -> str:
    """What the ClearURLs add-on does with ``rules``: for each matching provider, remove
    ``([/?#]|&)+(rule=[^&]*)`` case-insensitively."""
    for provider in providers.values():
        if re.search(provider["urlPattern"], url, re.IGNORECASE):
            for rule in provider["rules"]:
                url = re.sub(
                    r"([\/|\?|#]|(&|&amp;))+(" + rule + "=[^&]*)", "", url, flags=re.IGNORECASE
                )
    return url


def test_clearurls_match_the_schema_and_strip_only_neutral_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_run_export(tmp_path, capsys, "clearurls"))
    Draft202012Validator(
        CLEARURLS_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
    ).validate(document)
    providers = document["providers"]
    assert _clearurls_clean(providers, "https://shop.test/p/1?id=1&ref=a&utm_source=x") == (
        "https://shop.test/p/1?id=1"
    )
    assert _clearurls_clean(providers, "https://shop.test/pages?ref=a&utm_source=x") == (
        "https://shop.test/pages?ref=a"
    )
    assert _clearurls_clean(providers, "https://shop.test/search?q=1&page=1") == (
        "https://shop.test/search?q=1&page=1"
    )


def test_clearurls_keep_a_name_another_spelling_of_which_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cased = DomainMap(
        "cased.test",
        1,
        STAMP,
        {
            "/a?Ref&ref": _decision({"Ref": []}, {"ref": Layer.LEARNED}),
            "/a?sid": _decision({}, {"sid": Layer.LEARNED}),
        },
    )
    providers = json.loads(_run_export(tmp_path, capsys, "clearurls", [cased]))["providers"]
    assert [p["rules"] for p in providers.values()] == [["sid"]]


def test_export_refuses_unknown_domains_and_invalid_maps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "maps.jsonl"
    write_maps(path, [shop_map()])
    assert (
        main(["export", "--maps", str(path), "--format", "varnish", "--domain", "other.test"]) == 1
    )
    assert "no map for other.test" in capsys.readouterr().err
    path.write_text('{"schema": "miqps.map/1"}\n', encoding="utf-8")
    assert main(["export", "--maps", str(path), "--format", "varnish"]) == 2
    assert "maps.jsonl:1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown format"):
        export({}, "nginx")


def test_export_domain_is_matched_as_a_lowercased_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "maps.jsonl"
    write_maps(path, [shop_map()])
    assert main(["export", "--maps", str(path), "--format", "clean-param", "--domain", HOST]) == 0
    expected = capsys.readouterr().out
    shouted = HOST.upper()
    assert (
        main(["export", "--maps", str(path), "--format", "clean-param", "--domain", shouted]) == 0
    )
    assert capsys.readouterr().out == expected != ""


# --- varnish, with the real varnishd -------------------------------------------------

VARNISHD = shutil.which("varnishd") or next(
    (p for p in ("/usr/sbin/varnishd", "/usr/local/sbin/varnishd") if Path(p).exists()), None
)


class _Origin(BaseHTTPRequestHandler):
    """A cacheable page per request target, numbered by how often the origin served it."""

    served: list[str]

    def do_GET(self) -> None:
        self.served.append(self.path)
        body = f"{self.path} #{len(self.served)}".encode()
        self.send_response(200)
        self.send_header("Cache-Control", "max-age=300")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def varnish_front(tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    if VARNISHD is None:
        reason = "varnishd is not installed (scripts/setup installs it as root)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    served: list[str] = []
    handler = type("Origin", (_Origin,), {"served": served})
    origin = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    (tmp_path / "miqps.vcl").write_text(export({HOST: shop_map()}, "varnish"), "utf-8")
    (tmp_path / "main.vcl").write_text(
        "vcl 4.1;\n"
        f'backend origin {{ .host = "127.0.0.1"; .port = "{origin.server_address[1]}"; }}\n'
        f'include "{tmp_path / "miqps.vcl"}";\n'
        "sub vcl_recv { call miqps_strip; }\n",
        "utf-8",
    )
    port = _free_port()
    process = subprocess.Popen(
        [
            VARNISHD,
            "-F",
            "-j",
            "none",
            "-a",
            f"127.0.0.1:{port}",
            "-f",
            str(tmp_path / "main.vcl"),
            "-n",
            str(tmp_path / "work"),
            "-s",
            "malloc,16m",
            "-p",
            "vcc_allow_inline_c=off",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                output = process.stdout.read().decode() if process.stdout else ""
                pytest.fail(f"varnishd exited: {output}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("varnishd did not listen within 20 s")
                time.sleep(0.1)
        yield port, served
    finally:
        process.terminate()
        process.wait(timeout=10)
        origin.shutdown()


def _get(port: int, target: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", target, headers={"Host": HOST})
    body = connection.getresponse().read().decode()
    connection.close()
    return body


def test_varnish_serves_urls_differing_in_neutral_parameters_from_one_object(
    varnish_front: tuple[int, list[str]],
) -> None:
    port, served = varnish_front
    same = [
        "/p/1?id=1",
        "/p/1?id=1&ref=mail",
        "/p/1?utm_source=x&id=1&ref=y",
        "/p/1?ref=z&id=1&utm_source=q",
    ]
    bodies = {_get(port, target) for target in same}
    assert len(bodies) == 1 and len(served) == 1
    assert _get(port, "/search?q=a&page=1") == _get(port, "/search?q=a")
    assert _get(port, "/search?page=1&q=a") == _get(port, "/search?q=a")
    assert len(served) == 2


def test_varnish_keeps_apart_urls_differing_in_a_kept_parameter(
    varnish_front: tuple[int, list[str]],
) -> None:
    port, served = varnish_front
    targets = [
        "/p/1?id=1",
        "/p/1?id=2",
        "/pages?ref=a",
        "/pages?ref=b",
        "/search?q=a&ref=x",
        "/search?q=a&ref=y",
        "/search?q=a&page=2",
        "/search?q=a",
        "/p/1?id=1&idx=3",
        # A repeated name's values are one value: page=1&page=2 is not the default.
        "/search?q=a&page=1&page=2",
        "/search?q=a&page=2&page=1",
        "/search?page=2&q=a",
        "/?gclid=1",
        "/?gclid=2",
        "/cart?x=1&variant=1",
        "/cart?x=1&variant=2",
    ]
    bodies = [_get(port, target) for target in targets]
    assert len(set(bodies)) == len(targets) and len(served) == len(targets)
