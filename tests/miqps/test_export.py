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
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import ada_url
import pytest
import tldextract
from jsonschema import Draft202012Validator
from protego import Protego

from miqps.canonical import Canonicalizer, StaticLayers
from miqps.cli import main
from miqps.export import FORMATS, HOST_WIDE, export, neutral_scopes
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps
from miqps.urls import parse, path_shape, pattern_key

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
    for line in lines:
        assert CLEAN_PARAM.fullmatch(line) and len(line) <= 500, line
    assert lines == ["Clean-param: utm_source", "Clean-param: ref /item"]


def test_clean_param_appended_to_a_robots_txt_changes_none_of_its_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Yandex reads Clean-param anywhere in the file; a group of its own would make
    Yandex follow that group and ignore the ``User-agent: *`` rules."""
    text = _run_export(tmp_path, capsys, "clean-param")
    robots = "User-agent: *\nDisallow: /private\n\nUser-agent: Googlebot\nDisallow: /nogoogle\n"
    before, after = Protego.parse(robots), Protego.parse(robots + "\n" + text)
    for agent in ("YandexBot", "Yandex", "Googlebot", "SomeBot"):
        for path in ("/private/1", "/nogoogle", "/p/1?ref=a"):
            url = f"https://{HOST}{path}"
            assert after.can_fetch(url, agent) == before.can_fetch(url, agent), (agent, path)


def test_clean_param_writes_one_file_per_host(tmp_path: Path) -> None:
    other = DomainMap(
        "news.test", 2, STAMP, {"/a/*?id&sid": _decision({"id": []}, {"sid": Layer.LEARNED})}
    )
    maps = tmp_path / "maps.jsonl"
    write_maps(maps, [shop_map(), other])
    out = tmp_path / "robots"
    command = ["export", "--maps", str(maps), "--format", "clean-param", "--out-dir", str(out)]
    assert main(command) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "news.test.robots.txt",
        "shop.test.robots.txt",
    ]
    for domain_map in (shop_map(), other):
        written = (out / f"{domain_map.domain}.robots.txt").read_text()
        assert written == export({domain_map.domain: domain_map}, "clean-param")
        assert "Clean-param:" in written
    assert main([*command[:-2], "--format", "varnish", "--out-dir", str(out)]) == 2


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


def test_cloudflare_cache_key_only_leaves_caching_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eligible = json.loads(_run_export(tmp_path, capsys, "cloudflare"))
    assert all(rule["action_parameters"]["cache"] is True for rule in eligible["rules"])
    maps = tmp_path / "maps.jsonl"
    assert main(["export", "--maps", str(maps), "--format", "cloudflare", "--cache-key-only"]) == 0
    key_only = json.loads(capsys.readouterr().out)
    Draft202012Validator(CLOUDFLARE_SCHEMA).validate(key_only)
    assert [rule["action_parameters"] for rule in key_only["rules"]] == [
        {"cache_key": rule["action_parameters"]["cache_key"]} for rule in eligible["rules"]
    ]
    assert main(["export", "--maps", str(maps), "--format", "varnish", "--cache-key-only"]) == 2


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


def test_clearurls_match_the_schema_and_strip_only_neutral_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_run_export(tmp_path, capsys, "clearurls"))
    Draft202012Validator(
        CLEARURLS_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
    ).validate(document)
    providers = document["providers"]
    assert _clearurls_key(providers, "https://shop.test/p/1?id=1&ref=a&utm_source=x") == (
        "https://shop.test/p/1?id=1"
    )
    assert _clearurls_key(providers, "https://shop.test/pages?ref=a&utm_source=x") == (
        "https://shop.test/pages?ref=a"
    )
    assert _clearurls_key(providers, "https://shop.test/search?q=1&page=1") == (
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


def _need(tool: str | None, name: str) -> str:
    if tool is None:
        reason = f"{name} is not installed (scripts/setup installs it as root)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return tool


@contextmanager
def _varnishd(folder: Path, main_vcl: str) -> Iterator[int]:
    """A real varnishd on loopback running ``main_vcl``; yields its port."""
    (folder / "main.vcl").write_text(main_vcl, "utf-8")
    port = _free_port()
    process = subprocess.Popen(
        [
            _need(VARNISHD, "varnishd"),
            "-F",
            "-j",
            "none",
            "-a",
            f"127.0.0.1:{port}",
            "-f",
            str(folder / "main.vcl"),
            "-n",
            str(folder / "work"),
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
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def varnish_front(tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    _need(VARNISHD, "varnishd")
    served: list[str] = []
    handler = type("Origin", (_Origin,), {"served": served})
    origin = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    (tmp_path / "miqps.vcl").write_text(export({HOST: shop_map()}, "varnish"), "utf-8")
    main_vcl = (
        "vcl 4.1;\n"
        f'backend origin {{ .host = "127.0.0.1"; .port = "{origin.server_address[1]}"; }}\n'
        f'include "{tmp_path / "miqps.vcl"}";\n'
        "sub vcl_recv { call miqps_strip; }\n"
        "sub vcl_hash { call miqps_hash; return (lookup); }\n"
    )
    try:
        with _varnishd(tmp_path, main_vcl) as port:
            yield port, served
    finally:
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


VARNISHTEST = shutil.which("varnishtest")
VTC = """varnishtest "miqps.vcl keeps apart what canonicalize keeps apart; the user's vcl_hash runs"

server s1 -repeat 5 -keepalive {
    rxreq
    txresp -hdr "Cache-Control: max-age=300" -body "page"
} -start

varnish v1 -jail "-j none" -vcl+backend {
    include "INCLUDE";
    sub vcl_recv { call miqps_strip; }
    sub vcl_hash {
        hash_data(req.http.X-Tenant);
        call miqps_hash;
        return (lookup);
    }
} -start

client c1 {
    txreq -url "/search?ref=X&q=a" -hdr "Host: shop.test" -hdr "X-Tenant: A"
    rxresp
    txreq -url "/search?ref=X&q=a?utm_source=x" -hdr "Host: shop.test" -hdr "X-Tenant: A"
    rxresp
    txreq -url "/search?utm_source=y&ref=X&q=a" -hdr "Host: shop.test" -hdr "X-Tenant: A"
    rxresp
    txreq -url "/search?ref=X&q=a" -hdr "Host: shop.test" -hdr "X-Tenant: B"
    rxresp
    txreq -url "/p/1?id=1&next=/cart?ref=1" -hdr "Host: shop.test" -hdr "X-Tenant: A"
    rxresp
    txreq -url "/p/1?id=1&next=/cart?ref=2" -hdr "Host: shop.test" -hdr "X-Tenant: A"
    rxresp
} -run

varnish v1 -expect cache_miss == 5
varnish v1 -expect cache_hit == 1
"""


def test_varnishtest_a_question_mark_in_a_value_and_the_users_own_vcl_hash(
    tmp_path: Path,
) -> None:
    """Six requests in ``varnishtest``: a ``?`` inside a value (``q=a?utm_source=x``, an
    unencoded nested URL) starts no pair, a neutral parameter still hits, and the tenant
    header the user's own ``vcl_hash`` adds splits the cache: five misses and one hit."""
    tool = _need(VARNISHTEST, "varnishtest")
    (tmp_path / "miqps.vcl").write_text(export({HOST: shop_map()}, "varnish"), "utf-8")
    (tmp_path / "miqps.vtc").write_text(VTC.replace("INCLUDE", str(tmp_path / "miqps.vcl")))
    result = subprocess.run(
        [tool, "-q", "-t", "60", str(tmp_path / "miqps.vtc")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


# --- every format against the canonicalizer, differentially -------------------------
#
# Rule for every export: two URLs that ``miqps canonicalize`` keeps apart stay apart under
# the rule the export writes, as its consumer applies it. The corpus holds what real URLs
# carry and a naive query reader gets wrong: a ``?`` inside a value, unencoded nested URLs,
# an ``&`` in the path, dot segments and backslashes that move a URL to another path,
# encoded separators, repeated names and default values. Every pattern of the corpus is
# learned, since these formats know names, not patterns (see the README).

DIFF_HOST = "diff.test"
VALUES = ("1", "2")
DIFF_TEMPLATES = (
    "/p/1?id=1&q=a",
    "/p/1?id=1&q=a?utm_source={v}",
    "/p/1?id=1&q=a&utm_source={v}",
    "/p/1?id=1&q=a?ref={v}",
    "/p/1?id=1&ref={v}",
    "/p/1?id=1&q=a%26utm_source%3D{v}",
    "/p/1?id=1&q=a;utm_source={v}",
    "/p/1?id=1&utm_source",
    "/p/1?id=1&&utm_source={v}&",
    "/p/1?id={v}&sid={v}",
    "/p/./1?id=1&ref={v}",
    "/login?next=/cart",
    "/login?next=/cart?ref={v}",
    "/login?next=/cart&ref={v}",
    "/login?next=/p/1?id=1%26ref={v}",
    "/pages?ref={v}",
    "/p/../pages?ref={v}",
    "/p/%2e%2E/pages?ref={v}",
    "/p/..\\pages?ref={v}",
    "/a&utm_source={v}/b?id=1",
    "/search?q=a",
    "/search?q=a&page={v}",
    "/search?page={v}&q=a&utm_source={v}",
    "/search?q=a?page={v}",
    "/search?q=a&page=1?{v}",
    "/search?q=a&page=1&page={v}",
    "/search?q=a&ref={v}",
)
NEUTRAL_UNDER = {"utm_source": None, "sid": None, "ref": {"p", "login"}}
"""Names learned neutral: everywhere (None) or under these first segments only."""
DEFAULTS_UNDER = {("page", "search"): ["page=1"]}


def _differential_corpus() -> list[str]:
    urls = {f"http://{DIFF_HOST}{t.format(v=v)}" for t in DIFF_TEMPLATES for v in VALUES}
    return sorted(urls)


def _neutral_under(name: str, segment: str) -> bool:
    where = NEUTRAL_UNDER.get(name, ())
    return where is None or segment in where


def _differential_map(urls: list[str]) -> DomainMap:
    """A map learning every pattern of ``urls`` (and what dropping leads to) by the rules
    of :data:`NEUTRAL_UNDER` and :data:`DEFAULTS_UNDER`."""
    patterns: dict[str, PatternDecision] = {}
    for text in urls:
        url = parse(text)
        shape = path_shape(url.path)
        segment = shape.split("/")[1]
        for names in (url.names, frozenset(n for n in url.names if n not in NEUTRAL_UNDER)):
            neutral = {n for n in names if _neutral_under(n, segment)}
            kept = {n: DEFAULTS_UNDER.get((n, segment), []) for n in names - neutral}
            dropped = dict.fromkeys(neutral, Layer.LEARNED)
            patterns[pattern_key(shape, names)] = _decision(kept, dropped)
    return DomainMap(DIFF_HOST, 1, STAMP, patterns)


def _merged_apart(keys: dict[str, object], canonical: dict[str, str]) -> list[tuple[str, str]]:
    """Pairs of URLs under one export key that the canonicalizer keeps apart."""
    by_key: dict[object, list[str]] = {}
    for url, key in keys.items():
        by_key.setdefault(key, []).append(url)
    return [
        (group[0], other)
        for group in by_key.values()
        for other in group[1:]
        if canonical[other] != canonical[group[0]]
    ]


@pytest.fixture(scope="module")
def differential() -> tuple[dict[str, DomainMap], dict[str, str]]:
    urls = _differential_corpus()
    maps = {DIFF_HOST: _differential_map(urls)}
    canonicalizer = Canonicalizer(StaticLayers.default())
    canonicalizer.load(maps)
    canonical = {url: canonicalizer.canonical_text(url) for url in urls}
    # The corpus must hold URLs the canonicalizer merges and URLs it keeps apart.
    assert len(set(canonical.values())) < len(urls) / 1.3
    assert (
        canonical[f"http://{DIFF_HOST}/p/1?id=1&q=a?utm_source=1"]
        != (canonical[f"http://{DIFF_HOST}/p/1?id=1&q=a"])
    )
    return maps, canonical


def _path_and_pairs(url: str) -> tuple[str, str, tuple[str, ...]]:
    """Host, dot-segment-free path and raw query pairs, as a consumer that normalizes the
    path (a crawler resolving links, a CDN normalizing requests) reads ``url``."""
    parsed = ada_url.URL(url)
    return parsed.hostname, parsed.pathname, tuple(p for p in parsed.search[1:].split("&") if p)


def test_varnish_never_merges_what_the_canonicalizer_keeps_apart(
    tmp_path: Path, differential: tuple[dict[str, DomainMap], dict[str, str]]
) -> None:
    maps, canonical = differential
    (tmp_path / "miqps.vcl").write_text(export(maps, "varnish"), "utf-8")
    main_vcl = (
        "vcl 4.1;\n"
        'backend none { .host = "127.0.0.1"; .port = "9"; }\n'
        f'include "{tmp_path / "miqps.vcl"}";\n'
        "sub vcl_recv { call miqps_strip; return (synth(200)); }\n"
        "sub vcl_hash { call miqps_hash; return (lookup); }\n"
        "sub vcl_synth { set resp.body = req.http.X-MIQPS-Key; return (deliver); }\n"
    )
    with _varnishd(tmp_path, main_vcl) as port:
        keys: dict[str, object] = {}
        for url in canonical:
            target = url.removeprefix(f"http://{DIFF_HOST}")
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", target, headers={"Host": DIFF_HOST})
            keys[url] = connection.getresponse().read().decode()
            connection.close()
    assert not _merged_apart(keys, canonical)
    assert len(set(keys.values())) < len(keys), "and it still merges some"


def test_dud_rules_never_merge_what_the_canonicalizer_keeps_apart(
    tmp_path: Path,
    differential: tuple[dict[str, DomainMap], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from duplicate_url_discarder.url_canonicalizer import UrlCanonicalizer

    # url-matcher asks tldextract for registered domains: its bundled list, no download.
    monkeypatch.setattr(
        tldextract.tldextract, "TLD_EXTRACTOR", tldextract.TLDExtract(suffix_list_urls=())
    )
    maps, canonical = differential
    (tmp_path / "rules.json").write_text(export(maps, "dud-rules"), "utf-8")
    discarder = UrlCanonicalizer([tmp_path / "rules.json"])
    keys: dict[str, object] = {url: discarder.process_url(url) for url in canonical}
    assert not _merged_apart(keys, canonical)
    assert len(set(keys.values())) < len(keys)


def _cloudflare_key(rules: list[dict[str, Any]], url: str) -> object:
    """Cloudflare's cache key for ``url``: its normalized path, and the query without the
    names the last matching rule excludes (a later rule's cache key overrides)."""
    host, path, pairs = _path_and_pairs(url)
    excluded: list[str] = []
    for rule in rules:
        expression = re.sub(
            r"starts_with\(([\w.]+), (\"[^\"]*\")\)", r"\1.startswith(\2)", rule["expression"]
        )
        expression = expression.replace(" eq ", " == ").replace("http.request.uri.path", "path")
        if eval(expression.replace("http.host", "host"), {}, {"host": host, "path": path}):
            excluded = rule["action_parameters"]["cache_key"]["custom_key"]["query_string"][
                "exclude"
            ]["list"]
    return host, path, tuple(pair for pair in pairs if pair.partition("=")[0] not in excluded)


def _clean_param_key(lines: list[str], url: str) -> object:
    """What Yandex indexes ``url`` as: without the names of every ``Clean-param`` line
    whose path prefix (or none) the path starts with."""
    host, path, pairs = _path_and_pairs(url)
    removed: set[str] = set()
    for line in lines:
        names, _, prefix = line.removeprefix("Clean-param: ").partition(" ")
        if path.startswith(prefix or "/"):
            removed |= set(names.split("&"))
    return host, path, tuple(pair for pair in pairs if pair.partition("=")[0] not in removed)


def _clearurls_key(providers: dict[str, Any], url: str) -> object:
    """What the ClearURLs add-on makes of ``url``: for each provider whose ``urlPattern``
    matches (case-insensitively), the fields of ``URL.searchParams`` whose decoded name
    matches ``^rule$`` (case-insensitively) are deleted; when any was, the query is
    written again from what is left, as ``URLSearchParams.toString()`` does. A browser
    hands it the URL parsed, dot segments resolved."""
    parsed = ada_url.URL(url)
    url = parsed.href
    fields = parse_qsl(parsed.search[1:], keep_blank_values=True)
    left = fields
    for provider in providers.values():
        if re.search(provider["urlPattern"], url, re.IGNORECASE):
            for rule in provider["rules"]:
                left = [f for f in left if not re.fullmatch(rule, f[0], re.IGNORECASE)]
    if left == fields:
        return url
    base = url.partition("?")[0]
    return base + ("?" + urlencode(left) if left else "")


@pytest.mark.parametrize("fmt", ["cloudflare", "clean-param", "clearurls"])
def test_name_rules_never_merge_what_the_canonicalizer_keeps_apart(
    fmt: str, differential: tuple[dict[str, DomainMap], dict[str, str]]
) -> None:
    maps, canonical = differential
    text = export(maps, fmt)
    keys: dict[str, object]
    if fmt == "cloudflare":
        rules = json.loads(text)["rules"]
        keys = {url: _cloudflare_key(rules, url) for url in canonical}
    elif fmt == "clean-param":
        lines = [line for line in text.splitlines() if line.startswith("Clean-param:")]
        keys = {url: _clean_param_key(lines, url) for url in canonical}
    else:
        providers = json.loads(text)["providers"]
        keys = {url: _clearurls_key(providers, url) for url in canonical}
    assert not _merged_apart(keys, canonical)
    assert len({repr(key) for key in keys.values()}) < len(keys)


# Undecided patterns: a map records the patterns it asked about and could not decide (a
# client-side shell route, a disallowed one); canonicalize keeps their parameters, as for any
# pattern it never learned, and so must every export, in every scope that covers them.

SHELL_HOST = "shell.test"
SHELL_TEMPLATES = (
    "/search?q&utm_source={v}",
    "/search?q=&utm_source={v}",
    "/p/1?id=1&ref={v}&tab={v}",
    "/p/1?id=1&tab={v}",
    "/p/1?id=1&ref",
    "/p/1?id=1&ref&utm_source={v}",
    "/help?ref={v}&tab={v}",
    "/search?q=a&page={v}",
    "/search?q=a&page={v}&utm_source={v}",
    "/a/1?tab={v}",
    "/app/1?ref={v}&tab={v}",
    "/app/1?tab={v}",
    "/app/1?ref&utm_source={v}",
    "/app/1?ref=&utm_source={v}",
    "/app/1?page={v}",
    "/app/1?page=1&tab={v}",
    "/a1/x?tab={v}",
)
SHELL_VALUES = ("1", "2", "x y")
UNDECIDED_UNDER = {"app", "*"}
"""First segments whose patterns the map leaves undecided (``*``: not a word, ``/a1``)."""


def _shell_map(urls: list[str]) -> DomainMap:
    """Where learned: ``ref``, ``tab`` and ``utm_source`` neutral, ``page=1`` a default."""
    patterns: dict[str, PatternDecision] = {}
    undecided: dict[str, str] = {}
    for text in urls:
        url = parse(text)
        shape = path_shape(url.path)
        key = pattern_key(shape, url.names)
        if shape.split("/")[1] in UNDECIDED_UNDER:
            undecided[key] = "shells"
            continue
        for names in (url.names, url.names - {"ref", "tab", "utm_source"}):
            neutral = names & {"ref", "tab", "utm_source"}
            kept = {n: ["page=1"] if n == "page" else [] for n in names - neutral}
            patterns[pattern_key(shape, names)] = _decision(
                kept, dict.fromkeys(neutral, Layer.LEARNED)
            )
    return DomainMap(SHELL_HOST, 1, STAMP, patterns, undecided=undecided)


@pytest.fixture(scope="module")
def undecided_routes() -> tuple[dict[str, DomainMap], dict[str, str]]:
    urls = sorted(
        {f"http://{SHELL_HOST}{t.format(v=v)}" for t in SHELL_TEMPLATES for v in SHELL_VALUES}
    )
    maps = {SHELL_HOST: _shell_map(urls)}
    canonicalizer = Canonicalizer(StaticLayers.default())
    canonicalizer.load(maps)
    canonical = {url: canonicalizer.canonical_text(url) for url in urls}
    app = f"http://{SHELL_HOST}/app/1?tab="
    assert canonical[app + "1"] != canonical[app + "2"]  # kept apart on the shell route
    return maps, canonical


def _varnish_keys(tmp_path: Path, vcl: str, host: str, urls: list[str]) -> dict[str, object]:
    """The cache key a real varnishd computes with the exported ``vcl`` for each URL."""
    (tmp_path / "miqps.vcl").write_text(vcl, "utf-8")
    main_vcl = (
        "vcl 4.1;\n"
        'backend none { .host = "127.0.0.1"; .port = "9"; }\n'
        f'include "{tmp_path / "miqps.vcl"}";\n'
        "sub vcl_recv { call miqps_strip; return (synth(200)); }\n"
        "sub vcl_hash { call miqps_hash; return (lookup); }\n"
        "sub vcl_synth { set resp.body = req.http.X-MIQPS-Key; return (deliver); }\n"
    )
    keys: dict[str, object] = {}
    with _varnishd(tmp_path, main_vcl) as port:
        for url in urls:
            target = url.removeprefix(f"http://{host}").replace(" ", "%20")
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", target, headers={"Host": host})
            keys[url] = connection.getresponse().read().decode()
            connection.close()
    return keys


def _form_encoded(url: str) -> str:
    """``url`` with its query written again as ``URLSearchParams`` writes it."""
    base, _, query = url.partition("?")
    return base + "?" + urlencode(parse_qsl(query, keep_blank_values=True)) if query else url


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_no_export_merges_what_canonicalize_keeps_apart_on_undecided_routes(
    fmt: str,
    tmp_path: Path,
    undecided_routes: tuple[dict[str, DomainMap], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ClearURLs writes the query again whenever it removes a field, as ``URLSearchParams``
    does (``ref`` becomes ``ref=``, a space ``+``): its only merges that canonicalize keeps
    apart are URLs that spelling makes one, as the README says."""
    maps, canonical = undecided_routes
    text = export(maps, fmt)
    keys: dict[str, object]
    if fmt == "varnish":
        keys = _varnish_keys(tmp_path, text, SHELL_HOST, list(canonical))
    elif fmt == "dud-rules":
        from duplicate_url_discarder.url_canonicalizer import UrlCanonicalizer

        monkeypatch.setattr(
            tldextract.tldextract, "TLD_EXTRACTOR", tldextract.TLDExtract(suffix_list_urls=())
        )
        (tmp_path / "rules.json").write_text(text, "utf-8")
        discarder = UrlCanonicalizer([tmp_path / "rules.json"])
        keys = {url: discarder.process_url(url) for url in canonical}
    elif fmt == "cloudflare":
        rules = json.loads(text)["rules"]
        keys = {url: _cloudflare_key(rules, url) for url in canonical}
    elif fmt == "clean-param":
        lines = [line for line in text.splitlines() if line.startswith("Clean-param:")]
        keys = {url: _clean_param_key(lines, url) for url in canonical}
    else:
        providers = json.loads(text)["providers"]
        keys = {url: _clearurls_key(providers, url) for url in canonical}
    merged = _merged_apart(keys, canonical)
    if fmt == "clearurls":
        assert merged, "the documented difference is shown"
        merged = [
            (a, b) for a, b in merged if _form_encoded(canonical[a]) != _form_encoded(canonical[b])
        ]
    assert not merged
    assert len({repr(key) for key in keys.values()}) < len(keys), "and it still merges some"
