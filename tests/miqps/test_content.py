from miqps.content import (
    VolatilityModel,
    content_id,
    differing_paths,
    snapshot_bytes,
    snapshot_html,
)


def page(title: str, price: str, *, stamp: str = "10:00:00.1", recs: str = "A B",
         echo: str = "utm_source=x", csrf: str = "t0k3n") -> bytes:
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
    assert noise == {"body>aside.recs>ul>li", "body>footer>span.generated"}
    assert content_id(first, noise) == content_id(second, noise)


def test_another_product_or_variant_is_told_apart_despite_learned_noise() -> None:
    noise = {"body>aside.recs>ul>li", "body>footer>span.generated"}
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
        model.learn(template, snapshot_html(200, "u", page("Shoe", "$10", stamp=stamp)),
                    snapshot_html(200, "u", page("Shoe", "$10", stamp=stamp + "0")))
    assert "body>aside.recs>ul>li" not in model.paths(template)
    assert not model.known_stable(template, {"body>aside.recs>ul>li"})
    assert model.known_stable(template, {"body>main#product>h1", "body>main#product>p.price"})
    assert not model.known_stable(template, {"body>main#product>h1",
                                             "body>footer>span.generated"})
