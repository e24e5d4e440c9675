"""Pages that are not the page asked for: bot challenges, consent walls, client-side shells.

The challenge pages copy the shape of Cloudflare's (the classic "Checking your browser"
page, the managed "Just a moment..." challenge and the "Attention Required" captcha) and of
a cookie-consent wall: a learner must recognise them the way it would on the real web.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from html import escape

from simweb.sites import Interstitial, Site

_COLOS = ("FRA", "AMS", "LHR", "CDG", "ARN", "MAD", "WAW", "ZRH")
_CF_HEAD = (
    '<meta charset="UTF-8"><meta http-equiv="X-UA-Compatible" content="IE=Edge">'
    '<meta name="robots" content="noindex, nofollow">'
    '<meta name="viewport" content="width=device-width,initial-scale=1">'
)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    html: str


def interstitial(site: Site, kind: Interstitial, request_url: str, rng: random.Random) -> Answer:
    """The ``kind`` interstitial ``site`` shows instead of ``request_url``, with fresh tokens."""
    ray = f"{rng.getrandbits(64):016x}"
    headers = [
        ("Content-Type", "text/html; charset=UTF-8"),
        ("Cache-Control", "private, max-age=0, no-store, no-cache, must-revalidate"),
        ("Server", "cloudflare"),
        ("cf-ray", f"{ray}-{rng.choice(_COLOS)}"),
    ]
    host = escape(site.host)
    if kind is Interstitial.BROWSER_CHECK:
        html = _browser_check(host, ray, rng)
    elif kind is Interstitial.JUST_A_MOMENT:
        headers.append(("cf-mitigated", "challenge"))
        html = _just_a_moment(host, ray, rng)
    elif kind is Interstitial.BLOCKED:
        headers.append(("cf-mitigated", "challenge"))
        html = _attention_required(host, ray, rng)
    else:
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Cache-Control", "no-store"),
            ("Set-Cookie", f"CONSENT=PENDING+{rng.randrange(100, 999)}; Path=/; SameSite=Lax"),
        ]
        html = _consent_wall(site, request_url, rng)
    return Answer(kind.status, headers, html)


def _browser_check(host: str, ray: str, rng: random.Random) -> str:
    token = f"{rng.getrandbits(160):040x}"
    return (
        f'<!DOCTYPE HTML><html lang="en-US"><head>{_CF_HEAD}<title>Just a moment...</title>'
        "<style>html,body{width:100%;height:100%;margin:0;padding:0}body{background:#fff;"
        "font-family:Helvetica,Arial,sans-serif}#cf-content{max-width:600px;margin:100px auto}"
        "</style><script>(function(){var a=function(){try{return !!window.addEventListener}"
        "catch(e){return !1}};setTimeout(function(){document.getElementById("
        "'challenge-form').submit()},4000)})();</script></head><body>"
        '<table width="100%" height="100%" cellpadding="20"><tr><td align="center" '
        'valign="middle"><div class="cf-browser-verification cf-im-under-attack">'
        '<noscript><h1 data-translate="turn_on_js" style="color:#bd2426;">Please turn '
        "JavaScript on and reload the page.</h1></noscript>"
        '<div id="cf-content"><h1><span data-translate="checking_browser">Checking your '
        f"browser before accessing</span> {host}.</h1>"
        '<p data-translate="process_is_automatic">This process is automatic. Your browser '
        "will redirect to your requested content shortly.</p>"
        '<p data-translate="allow_5_secs">Please allow up to 5 seconds&hellip;</p></div>'
        f'<form id="challenge-form" action="/?__cf_chl_jschl_tk__={token}" method="POST" '
        'enctype="application/x-www-form-urlencoded">'
        f'<input type="hidden" name="r" value="{rng.getrandbits(256):064x}">'
        f'<input type="hidden" name="jschl_vc" value="{rng.getrandbits(128):032x}">'
        f'<input type="hidden" name="pass" value="{rng.randrange(10**9, 10**10)}.'
        f'{rng.randrange(1000)}">'
        '<input type="hidden" id="jschl-answer" name="jschl_answer"></form></div>'
        '<div class="attribution"><a href="https://www.cloudflare.com/5xx-error-landing/" '
        'target="_blank">DDoS protection by Cloudflare</a><br>'
        f"Ray ID: {ray}</div></td></tr></table></body></html>"
    )


def _just_a_moment(host: str, ray: str, rng: random.Random) -> str:
    return (
        f'<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>{_CF_HEAD}'
        "<style>*{box-sizing:border-box;margin:0;padding:0}html{line-height:1.15;"
        "font-family:system-ui,-apple-system,sans-serif}.main-wrapper{display:flex;"
        "flex:1;flex-direction:column;align-items:center}</style></head><body>"
        '<div class="main-wrapper" role="main"><div class="main-content">'
        f'<h1 class="zone-name-title h1">{host}</h1>'
        '<h2 class="h2" id="challenge-running">Checking if the site connection is secure</h2>'
        '<noscript><div id="challenge-error-title"><div class="h2"><span '
        'id="challenge-error-text">Enable JavaScript and cookies to continue</span></div>'
        "</div></noscript>"
        f'<div id="challenge-body-text" class="core-msg spacer">{host} needs to review the '
        "security of your connection before proceeding.</div></div></div>"
        "<script>(function(){window._cf_chl_opt={cvId: '3',"
        f"cZone: '{host}',cType: 'managed',cNounce: '{rng.randrange(10000, 99999)}',"
        f"cRay: '{ray}',cHash: '{rng.getrandbits(60):015x}',"
        f'cUPMDTk: "\\/?__cf_chl_tk={rng.getrandbits(200):050x}",'
        f"cFPWv: 'b',cTTimeMs: '1000',cMTimeMs: '{rng.choice((60000, 120000))}',"
        f'cTplV: 5,cTplB: \'cf\',cK: "",fa: "\\/?__cf_chl_f_tk={rng.getrandbits(200):050x}",'
        "md: '" + f"{rng.getrandbits(512):0128x}" + "',cRq: {ru: 'aHR0cA==',ra: 'bW96aWxsYQ==',"
        f"rm: 'R0VU',d: '{rng.getrandbits(384):096x}'}}}};var cpo=document.createElement("
        "'script');cpo.src='/cdn-cgi/challenge-platform/h/b/orchestrate/chl_page/v1?ray="
        f"{ray}';document.getElementsByTagName('head')[0].appendChild(cpo);}}());</script>"
        '<div class="footer" role="contentinfo"><div class="footer-inner">'
        '<div class="clearfix diagnostic-wrapper"><div class="ray-id">Ray ID: '
        f"<code>{ray}</code></div></div>"
        '<div class="text-center" id="footer-text">Performance &amp; security by '
        '<a rel="noopener noreferrer" href="https://www.cloudflare.com?utm_source='
        'challenge&amp;utm_campaign=m" target="_blank">Cloudflare</a></div></div></div>'
        "</body></html>"
    )


def _attention_required(host: str, ray: str, rng: random.Random) -> str:
    ip = f"198.51.100.{rng.randrange(1, 255)}"
    return (
        '<!DOCTYPE html><!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> '
        '<![endif]--><html class="no-js" lang="en-US"><head>'
        f"<title>Attention Required! | Cloudflare</title>{_CF_HEAD}"
        '<link rel="stylesheet" id="cf_styles-css" href="/cdn-cgi/styles/cf.errors.css">'
        "</head><body>"
        '<div id="cf-wrapper"><div class="cf-alert cf-alert-error cf-cookie-error" '
        'id="cookie-alert" data-translate="enable_cookies">Please enable cookies.</div>'
        '<div id="cf-error-details" class="cf-error-details-wrapper">'
        '<div class="cf-wrapper cf-header cf-error-overview">'
        '<h1 data-translate="challenge_headline">One more step</h1>'
        '<h2 class="cf-subheadline"><span data-translate="complete_sec_check">Please '
        f"complete the security check to access</span> {host}</h2></div>"
        '<div class="cf-section cf-highlight cf-captcha-container"><div class="cf-wrapper">'
        '<div class="cf-columns two"><div class="cf-column"><div class="cf-highlight-inverse '
        'cf-form-stacked"><form class="challenge-form" id="challenge-form" '
        f'action="/?__cf_chl_captcha_tk__={rng.getrandbits(160):040x}" method="POST">'
        f'<input type="hidden" name="r" value="{rng.getrandbits(256):064x}">'
        '<div class="g-recaptcha"></div></form></div></div></div></div></div>'
        '<div class="cf-section cf-wrapper"><div class="cf-columns two"><div class="cf-column">'
        '<h2 data-translate="why_captcha_headline">Why do I have to complete a CAPTCHA?</h2>'
        '<p data-translate="why_captcha_detail">Completing the CAPTCHA proves you are a '
        "human and gives you temporary access to the web property.</p></div>"
        '<div class="cf-column"><h2 data-translate="resolve_captcha_headline">What can I do '
        "to prevent this in the future?</h2>"
        '<p data-translate="resolve_captcha_antivirus">If you are on a personal connection, '
        "like at home, you can run an anti-virus scan on your device to make sure it is not "
        "infected with malware.</p></div></div></div>"
        '<div class="cf-error-footer cf-wrapper w-240 lg:w-full py-10 sm:py-4 sm:px-8 mx-auto '
        'text-center sm:text-left border-solid border-0 border-t border-gray-300">'
        '<p class="text-13"><span class="cf-footer-item sm:block sm:mb-1">Cloudflare Ray ID: '
        f'<strong class="font-semibold">{ray}</strong></span><span class="cf-footer-separator '
        'sm:hidden">&bull;</span><span id="cf-footer-item-ip" class="cf-footer-item hidden '
        'sm:block sm:mb-1">Your IP: <button type="button" id="cf-footer-ip-reveal" '
        'class="cf-footer-ip-reveal-btn">Click to reveal</button><span class="hidden" '
        f'id="cf-footer-ip">{ip}</span></span><span class="cf-footer-separator sm:hidden">'
        '&bull;</span><span class="cf-footer-item sm:block sm:mb-1"><span>Performance '
        '&amp; security by</span> <a rel="noopener noreferrer" href="https://www.cloudflare.'
        'com/5xx-error-landing" id="brand_link" target="_blank">Cloudflare</a></span></p>'
        "</div></div></div></body></html>"
    )


def _consent_wall(site: Site, request_url: str, rng: random.Random) -> str:
    name = escape(site.host.split(".")[0].replace("-", " ").title())
    consent_host = f"consent.{escape(site.host)}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Before you continue to {name}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex"></head><body class="consent-page">'
        '<div class="consent-wall" role="dialog" aria-modal="true" '
        'aria-labelledby="consent-title">'
        f'<h1 id="consent-title">Before you continue to {name}</h1>'
        "<p>We use cookies and data to deliver and maintain our services, like tracking "
        "outages and protecting against spam, fraud and abuse, and to measure audience "
        "engagement and site statistics to understand how our services are used.</p>"
        "<p>If you choose to “Accept all”, we will also use cookies and data to develop and "
        "improve new services, deliver and measure the effectiveness of ads, and show "
        "personalised content and ads depending on your settings.</p>"
        f'<form method="post" action="https://{consent_host}/save">'
        f'<input type="hidden" name="continue" value="{escape(request_url)}">'
        f'<input type="hidden" name="x" value="{rng.getrandbits(64):016x}">'
        '<button name="set_eom" value="true">Reject all</button>'
        '<button name="set_eom" value="false">Accept all</button></form>'
        f'<a href="https://{consent_host}/more-options">More options</a>'
        f'<p class="legal"><a href="https://{consent_host}/privacy">Privacy</a> · '
        f'<a href="https://{consent_host}/terms">Terms</a></p></div></body></html>'
    )


def client_shell(site: Site, rng: random.Random) -> str:
    """The page of a client-rendered route: the same empty shell for every item."""
    build = f"{site.seed & 0xFFFFFFFF:08x}"
    name = escape(site.host.split(".")[0].replace("-", " ").title())
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="theme-color" content="#000000"><title>{name}</title>'
        '<link rel="manifest" href="/manifest.json">'
        f'<link href="/static/css/main.{build}.css" rel="stylesheet"></head><body>'
        "<noscript>You need to enable JavaScript to run this app.</noscript>"
        '<div id="root"></div>'
        f'<script nonce="{rng.getrandbits(96):024x}" defer '
        f'src="/static/js/main.{build}.js"></script></body></html>'
    )
