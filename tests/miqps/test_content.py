import random

from miqps.content import (
    Snapshot,
    VolatilityModel,
    content_id,
    differing_paths,
    snapshot_bytes,
    snapshot_html,
)
from miqps.content import (
    block_key as K,
)


def page(
    title: str,
    price: str,
    *,
    stamp: str = "10:00:00.1",
    recs: str = "A B",
    echo: str = "utm_source=x",
    csrf: str = "t0k3n",
) -> bytes:
    return f"""<html><head><title>{title}</title>
    <link rel="canonical" href="http://shop.example/">
    <script src="/app.js?{echo}"></script></head>
    <body><main id="product"><h1>{title}</h1><p class="price">{price}</p>
    <a href="/cart?{echo}">Cart</a>
    <form><input type="hidden" name="csrf" value="{csrf}">
    <input type="hidden" name="q" value="{echo}"></form>
    </main>
    <aside class="recs"><ul><li>{recs}</li></ul></aside>
    <footer><span class="generated">{stamp}</span></footer>
    <script>var nonce = "{csrf}";</script></body></html>""".encode()


def test_echoed_tracking_values_in_attributes_and_scripts_do_not_change_the_id() -> None:
    a = snapshot_html(200, "u", page("Shoe", "$10", echo="utm_source=a", csrf="1"))
    b = snapshot_html(200, "u", page("Shoe", "$10", echo="sid=zz&utm_source=b", csrf="2"))
    assert differing_paths(a, b) == set()
    assert content_id(a) == content_id(b)


def test_noise_is_learned_from_two_fetches_not_guessed() -> None:
    first = snapshot_html(200, "u", page("Shoe", "$10", stamp="1", recs="A"))
    second = snapshot_html(200, "u", page("Shoe", "$10", stamp="2", recs="B"))
    assert content_id(first) != content_id(second), "without learning, noise shows"
    model = VolatilityModel()
    model.learn("shop.example/p/*", first, second)
    noise = model.paths("shop.example/p/*")
    assert noise == {K("body>aside.recs>ul>li"), K("body>footer>span.generated")}
    assert content_id(first, noise) == content_id(second, noise)


def test_another_product_or_variant_is_told_apart_despite_learned_noise() -> None:
    noise = {K("body>aside.recs>ul>li"), K("body>footer>span.generated")}
    red = snapshot_html(200, "u", page("Shoe (red)", "$10"))
    blue = snapshot_html(200, "u", page("Shoe (blue)", "$10", stamp="9", recs="Z"))
    pricier = snapshot_html(200, "u", page("Shoe (red)", "$12", stamp="9", recs="Z"))
    assert content_id(red, noise) != content_id(blue, noise)
    assert content_id(red, noise) != content_id(pricier, noise)


def test_status_is_part_of_the_content_id() -> None:
    ok = snapshot_html(200, "u", page("Gone", "-"))
    missing = snapshot_html(404, "u", page("Gone", "-"))
    assert content_id(ok) != content_id(missing)


def test_rel_canonical_is_only_recorded_as_a_hint() -> None:
    snap = snapshot_html(200, "u", page("Shoe", "$10"))
    assert snap.canonical_hint == "http://shop.example/"
    other = snapshot_html(200, "u", page("Boot", "$10"))
    assert content_id(snap) != content_id(other), "same canonical hint, different pages"


def test_non_html_bodies_hash_their_bytes() -> None:
    empty_object = snapshot_bytes(200, "u", b"{}")
    assert content_id(empty_object) != content_id(snapshot_bytes(200, "u", b"[]"))


def test_a_page_that_is_mostly_noise_is_too_noisy_to_compare() -> None:
    body = b"<body><div class='a'>1</div><div class='b'>2</div><p>x</p></body>"
    body2 = b"<body><div class='a'>3</div><div class='b'>4</div><p>x</p></body>"
    model = VolatilityModel()
    first, second = snapshot_html(200, "u", body), snapshot_html(200, "u", body2)
    model.learn("t", first, second)
    assert model.too_noisy("t", first)
    model2 = VolatilityModel()
    model2.learn("t", first, first)
    assert not model2.too_noisy("t", first)


def test_a_rotating_block_that_repeated_by_chance_is_not_taken_for_content() -> None:
    template = "shop.example/p/*"
    model = VolatilityModel(stable_after=2)
    for stamp in ("1", "2", "3"):
        # the recommendations happened to repeat on every refetch so far
        model.learn(
            template,
            snapshot_html(200, "u", page("Shoe", "$10", stamp=stamp)),
            snapshot_html(200, "u", page("Shoe", "$10", stamp=stamp + "0")),
        )
    assert K("body>aside.recs>ul>li") not in model.paths(template)
    assert not model.known_stable(template, {K("body>aside.recs>ul>li")})
    assert model.known_stable(template, {K("body>main#product>h1"), K("body>main#product>p.price")})
    assert not model.known_stable(
        template, {K("body>main#product>h1"), K("body>footer>span.generated")}
    )


def product(
    *,
    image: str = "/img/shoe-red.jpg",
    selected: str = "red",
    size: str = "M",
    echo: str = "",
    nonce: str = "n1",
    pixel: str = "",
    data: bool = True,
) -> bytes:
    """A product page whose colour shows only in its images and selected option, and whose
    size only in its structured data; ``echo`` is a query echoed where real sites echo it."""
    query = f"?{echo}" if echo else ""
    options = "".join(
        f'<option value="{c}"{" selected" if c == selected else ""}>{c}</option>'
        for c in ("red", "blue")
    )
    ld = (
        '{"@context": "https://schema.org", "@type": "Product", "name": "Shoe",'
        f' "url": "https://shop.example/p/1{query}", "@id": "https://shop.example/p/1{query}#p",'
        f' "image": "https://cdn.example{image}?w=600&{echo}",'
        f' "offers": {{"@type": "Offer", "sku": "1-{size}", "price": "10"}}}}'
    )
    query_object = ", ".join(
        f'"{pair.split("=")[0]}": "{pair.split("=")[1]}"' for pair in echo.split("&") if pair
    )
    next_data = (
        f'{{"props": {{"pageProps": {{"product": {{"id": 1, "size": "{size}"}}}}}},'
        f' "query": {{{query_object}}}, "asPath": "/p/1{query}", "nonce": "{nonce}"}}'
    )
    scripts = (
        f'<script type="application/ld+json">{ld}</script>'
        f'<script id="__NEXT_DATA__" type="application/json">{next_data}</script>'
        if data
        else ""
    )
    return f"""<html><head><title>Shoe</title>
    <meta property="og:image" content="https://cdn.example{image}?v=3&{echo}">
    <meta property="og:url" content="https://shop.example/p/1{query}">
    {scripts}</head>
    <body><main><h1>Shoe</h1><p>Comfortable shoe for every day.</p>
    <img src="{image}?w=300&{echo}" srcset="{image}?w=600 2x" alt="Shoe">
    <img src="/px.gif?{pixel or echo}" width="1" height="1" alt="">
    <select name="color">{options}</select>
    <input type="hidden" name="ref" value="{echo}">
    </main></body></html>""".encode()


def snap(body: bytes, request: str = "http://shop.example/p/1") -> Snapshot:
    return snapshot_html(200, request, body, request_url=request)


def test_a_variant_shown_only_by_its_image_and_selected_option_is_another_item() -> None:
    red = snap(product())
    blue = snap(product(image="/img/shoe-blue.jpg", selected="blue"))
    assert content_id(red) != content_id(blue)
    only_image = snap(product(image="/img/shoe-blue.jpg"))
    only_option = snap(product(selected="blue"))
    assert content_id(only_image) != content_id(red)
    assert content_id(only_option) != content_id(red)


def test_a_variant_shown_only_in_structured_data_is_another_item() -> None:
    assert content_id(snap(product(size="M"))) != content_id(snap(product(size="L")))


def test_tracking_echoed_into_images_pixels_urls_data_and_hidden_inputs_is_not_content() -> None:
    bare = snap(product())
    echo = "utm_source=mail&gclid=abc123"
    tracked = snap(product(echo=echo, pixel="sid=zz9"), f"http://shop.example/p/1?{echo}")
    assert differing_paths(bare, tracked) == set()


def test_a_query_mirror_is_left_out_only_when_it_mirrors_the_request() -> None:
    """The same object is an echo when the request carries those values, content when not."""
    echo = "size=L&utm_source=x"
    mirrored = snap(product(echo=echo), f"http://shop.example/p/1?{echo}")
    assert differing_paths(snap(product()), mirrored) == set()
    other = "size=M&utm_source=y"
    unrelated = snap(product(echo=echo), f"http://shop.example/p/1?{other}")
    assert K("data>#__NEXT_DATA__>.query.size") in differing_paths(
        snap(product(echo=other), f"http://shop.example/p/1?{other}"), unrelated
    )


def test_noise_inside_a_data_blob_is_learned_per_leaf() -> None:
    first, second = snap(product(nonce="a1")), snap(product(nonce="b2"))
    model = VolatilityModel()
    changed = model.learn("shop.example/p/*", first, second)
    assert changed == {K("data>#__NEXT_DATA__>.nonce")}
    other_size = snap(product(nonce="c3", size="L"))
    noise = model.paths("shop.example/p/*")
    assert content_id(first, noise) == content_id(second, noise)
    assert content_id(first, noise) != content_id(other_size, noise)


CHALLENGE = b"""<html><head><title>Just a moment...</title></head><body>
<h1>Checking your browser before accessing shop.example.</h1>
<p>This process is automatic. Your browser will redirect to your requested content shortly.</p>
<p>Ray ID: 8c2f9a1b3d4e5f60</p><script src="/cdn-cgi/challenge-platform/h/b/orchestrate.js">
</script></body></html>"""


def test_interstitials_are_unjudgeable_whatever_their_status() -> None:
    for status in (200, 403, 503):
        assert (snapshot_html(status, "u", CHALLENGE).unjudgeable or "").startswith("interstitial")
    assert snap(product()).unjudgeable is None


def test_a_client_side_shell_is_unjudgeable_but_a_data_only_page_is_not() -> None:
    shell = b"""<html><head><title>Shop</title></head><body><header><nav>Home Shop Cart
    </nav></header><div id="root"></div><noscript>You need to enable JavaScript.</noscript>
    <script src="/static/app.js"></script></body></html>"""
    assert snapshot_html(200, "u", shell).unjudgeable == (
        "client-side shell: no data and almost no text"
    )
    data_only = snap(product()).unjudgeable
    assert data_only is None


def test_pages_beyond_the_parsing_caps_are_unjudgeable_and_cost_linear_memory() -> None:
    deep = b"<html><body>" + b"<div>x" * 40_000 + b"</body></html>"
    assert "deeper" in (snapshot_html(200, "u", deep).unjudgeable or "")
    not_too_deep = b"<html><body>" + b"<div>x" * 300 + b"</div>" * 300 + b"</body></html>"
    assert "deeper" in (snapshot_html(200, "u", not_too_deep).unjudgeable or "")
    shallow = b"<html><body>" + b"<div>x</div>" * 300 + b"</body></html>"
    assert snapshot_html(200, "u", shallow).unjudgeable is None
    noise = random.Random(1).randbytes(200_000)
    assert "binary" in (snapshot_html(200, "u", noise).unjudgeable or "")
    wide = b"<html><body>" + b"<p>x</p>" * 200_000 + b"</body></html>"
    assert "elements" in (snapshot_html(200, "u", wide).unjudgeable or "")


def test_a_data_blob_repeating_the_query_string_is_not_content() -> None:
    def blob(search: str) -> bytes:
        return (
            f"<html><body><main><h1>Shoe</h1><p>{'Fine shoe. ' * 20}</p></main>"
            f'<script id="state" type="application/json">{{"search": "{search}"}}'
            "</script></body></html>"
        ).encode()

    plain = snapshot_html(200, "u", blob(""), request_url="http://s.example/p/1")
    echoed = snapshot_html(
        200,
        "u",
        blob("utm_source=x&gclid=1"),
        request_url="http://s.example/p/1?utm_source=x&gclid=1",
    )
    assert differing_paths(plain, echoed) == set()
    other = snapshot_html(200, "u", blob("q=boots"), request_url="http://s.example/p/1")
    assert differing_paths(plain, other)


def test_an_interstitial_is_known_by_its_title_too() -> None:
    page = (
        b"<html><head><title>Attention Required! | Cloudflare</title></head><body>"
        b"<h1>Sorry, you have been blocked</h1></body></html>"
    )
    assert (snapshot_html(403, "u", page).unjudgeable or "").startswith("interstitial")


def test_a_query_object_is_an_echo_also_when_the_request_has_no_query() -> None:
    """Next.js puts route parameters in ``query`` beside the request's own."""

    def page(query: str) -> bytes:
        return (
            f"<html><body><main><h1>Shelf</h1><p>{'Steel shelf. ' * 20}</p></main>"
            '<script id="__NEXT_DATA__" type="application/json">'
            f'{{"props": {{"sku": "E-1"}}, "query": {{"sku": "E-1"{query}}}}}'
            "</script></body></html>"
        ).encode()

    tracked = snapshot_html(
        200, "u", page(', "sid": "9f0c"'), request_url="http://s.example/products/E-1?sid=9f0c"
    )
    bare = snapshot_html(200, "u", page(""), request_url="http://s.example/products/E-1")
    assert differing_paths(tracked, bare) == set()


def test_a_nuxt_payload_is_read_by_reference_so_an_echoed_query_moves_nothing() -> None:
    """In a devalue payload an echoed query adds array entries and shifts every index
    after it; the item must still be found at the same place, and the echo left out."""

    def nuxt(payload: str) -> bytes:
        return (
            f"<html><body><main><h1>Thing</h1><p>{'Fine thing. ' * 20}</p></main>"
            f'<script id="__NUXT_DATA__" type="application/json">{payload}'
            "</script></body></html>"
        ).encode()

    head = '[["ShallowReactive",1],{"data":2,"query":3,"path":4},'
    bare = snapshot_html(
        200, "u", nuxt(head + '{"size":5},{},"/dp/1","M"]'), request_url="http://s.example/dp/1"
    )
    tracked = snapshot_html(
        200,
        "u",
        nuxt(
            head + '{"size":7},{"utm_source":5,"ref":6},"/dp/1?utm_source=mail&ref=app",'
            '"mail","app","M"]'
        ),
        request_url="http://s.example/dp/1?utm_source=mail&ref=app",
    )
    assert differing_paths(bare, tracked) == set()
    larger = snapshot_html(
        200, "u", nuxt(head + '{"size":5},{},"/dp/1","L"]'), request_url="http://s.example/dp/1"
    )
    assert differing_paths(bare, larger) == {K("data>#__NUXT_DATA__>.data.size")}


def templated(
    title: str,
    *,
    layout: int = 0,
    recs: str = "Boot $9",
    stamp: str = "10:00:00.1",
    image: str = "/img/shoe.jpg",
) -> bytes:
    """One item page in one of two templates: the second wraps the same content in other
    elements and renames every class, as a print view or an A/B layout does."""
    content = (
        f"<h1 class='{'v2-title' if layout else 'title'}'>{title}</h1>"
        f"<img src='{image}?w=300' alt=''>"
        f"<p class='{'v2-price' if layout else 'price'}'>$10</p>"
        f"<div class='{'v2-copy' if layout else 'desc'}'><p>Soft leather.</p><p>Warm lining.</p>"
        "</div>"
    )
    side = f"<ul><li>{recs}</li></ul>"
    if layout:
        body = (
            f"<div class='ab-shell'><section class='v2-main'><div>{content}</div></section>"
            f"<div class='v2-side'><aside class='v2-recs'>{side}</aside></div></div>"
            f"<footer class='v2'><p class='v2-stamp'>{stamp}</p></footer>"
        )
    else:
        body = (
            f"<main id='product' class='pdp'>{content}</main><aside class='recs'>{side}</aside>"
            f"<footer><span class='generated'>{stamp}</span></footer>"
        )
    return f"<html><head><title>{title}</title></head><body>{body}</body></html>".encode()


def test_the_same_item_in_another_template_is_the_same_item_and_two_items_never_are() -> None:
    plain = snap(templated("Shoe"))
    other_layout = snap(templated("Shoe", layout=1))
    assert differing_paths(plain, other_layout) == set()
    assert content_id(plain) == content_id(other_layout)
    for layout in (0, 1):
        shoe, boot = snap(templated("Shoe", layout=layout)), snap(templated("Boot", layout=layout))
        assert content_id(shoe) != content_id(boot)
        blue = snap(templated("Shoe", layout=layout, image="/img/shoe-blue.jpg"))
        assert content_id(shoe) != content_id(blue), "a variant shown only by its image"
    assert content_id(plain) != content_id(snap(templated("Boot", layout=1)))


def test_two_fetches_in_two_layouts_show_only_the_noise_changing() -> None:
    template = "shop.example/p/*"
    model = VolatilityModel()
    first = snap(templated("Shoe", recs="Boot $9", stamp="1"))
    second = snap(templated("Shoe", layout=1, recs="Sock $2", stamp="2"))
    changed = model.learn(template, first, second)
    assert changed == {
        K("body>aside.recs>ul>li"),
        K("body>footer>span.generated"),
        K("body>div.ab-shell>div.v2-side>aside.v2-recs>ul>li"),
        K("body>footer.v2>p.v2-stamp"),
    }
    assert not model.too_noisy(template, first)
    noise = model.paths(template)
    third = snap(templated("Shoe", layout=1, recs="Hat $5", stamp="3"))
    assert content_id(first, noise) == content_id(third, noise)
    assert content_id(first, noise) != content_id(snap(templated("Boot", layout=1)), noise)


def test_a_block_shown_twice_differs_from_the_same_block_shown_once_in_another_layout() -> None:
    once = snapshot_html(200, "u", b"<body><main><h1>Shoe</h1><p>Sale</p></main></body>")
    twice = snapshot_html(
        200,
        "u",
        b"<body><div class='v2'><h1>Shoe</h1><p>Sale</p></div><div><b>Sale</b></div></body>",
    )
    assert differing_paths(once, twice) == {K("body>div>b")}
    assert content_id(once) != content_id(twice)


def test_two_blocks_that_swap_places_are_another_page() -> None:
    """Home and away swapped: every text is still on the page, each in the other's place."""

    def match(home: str, away: str, layout: str = "") -> Snapshot:
        body = (
            f"<body><main{layout}><h1>Final</h1><p class='home'>{home}</p>"
            f"<p class='away'>{away}</p></main></body>"
        )
        return snapshot_html(200, "u", body.encode())

    assert differing_paths(match("Lions", "Bears"), match("Bears", "Lions")) == {
        K("body>main>p.home"),
        K("body>main>p.away"),
    }
    assert differing_paths(match("Lions", "Bears"), match("Lions", "Bears", " class='v2'")) == set()
