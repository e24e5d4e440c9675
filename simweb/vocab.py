"""Word lists the synthetic sites draw names, descriptions and parameter values from."""

from __future__ import annotations

from dataclasses import dataclass


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


@dataclass(frozen=True)
class Theme:
    item_word: str
    adjectives: tuple[str, ...]
    nouns: tuple[str, ...]
    categories: tuple[str, ...]
    brands: tuple[str, ...]
    filler: tuple[str, ...]


_FILLER = _words("""
    about above across after again against along already always among another around
    because before behind being below between both built careful clear close common
    daily deep designed detail different during early easy every everyday extra famous
    fast feature field final first fresh friendly full good great guide hand heavy
    honest ideal inside itself keeps known large later light local long made many
    modern more most natural nearly needs never often only open original other
    outside over perfect plain popular practical proper quality quick quiet ready real
    reliable right robust same simple small smart smooth solid special steady still
    strong sturdy style subtle sure through today together tough under useful usual
    versatile warm well whole wide without works year young
    """)

THEMES: dict[str, Theme] = {
    "goods": Theme(
        item_word="product",
        adjectives=_words(
            "walnut oak steel linen cotton wool ceramic copper bamboo glass leather velvet "
            "compact classic nordic rustic vintage modular foldable portable"
        ),
        nouns=_words(
            "lamp chair table sofa mug kettle backpack shelf rug blanket clock mirror vase "
            "desk stool cushion planter tray bottle speaker"
        ),
        categories=_words("lighting seating tables kitchen bags decor storage textiles audio"),
        brands=_words("acme northwind lumen oakhill brightway tallis fjord kestrel"),
        filler=_FILLER,
    ),
    "fashion": Theme(
        item_word="item",
        adjectives=_words(
            "slim relaxed cropped oversized tailored striped quilted knitted pleated washed "
            "raw organic recycled merino denim suede"
        ),
        nouns=_words(
            "jacket shirt sneaker boot dress skirt hoodie coat scarf beanie trousers blazer "
            "cardigan sandal parka vest"
        ),
        categories=_words("men women kids shoes outerwear knitwear accessories sale"),
        brands=_words("urbano fieldmark loomwell norrland vela corvid atelier9"),
        filler=_FILLER,
    ),
    "news": Theme(
        item_word="article",
        adjectives=_words(
            "council regional national late major surprise record quiet historic early "
            "final new rising falling"
        ),
        nouns=_words(
            "vote budget storm election strike report merger trial festival match summit "
            "deal protest verdict forecast"
        ),
        categories=_words("world politics business science sport culture local opinion"),
        brands=_words("desk wire bureau staff"),
        filler=_FILLER,
    ),
    "events": Theme(
        item_word="event",
        adjectives=_words(
            "jazz indie classical electronic comedy opera acoustic summer winter late "
            "open-air family"
        ),
        nouns=_words(
            "night festival concert session tour gala showcase marathon matinee party "
            "recital workshop"
        ),
        categories=_words("music comedy theatre sport family festivals talks"),
        brands=_words("arena hall dome theatre club stadium"),
        filler=_FILLER,
    ),
    "docs": Theme(
        item_word="page",
        adjectives=_words(
            "installing configuring upgrading debugging deploying securing scaling "
            "testing migrating tuning"
        ),
        nouns=_words(
            "server client cache router scheduler storage plugins logging metrics "
            "auth cluster queue api cli"
        ),
        categories=_words("guides reference tutorials howto faq release-notes"),
        brands=_words("core cloud edge mobile"),
        filler=_FILLER,
    ),
    "forum": Theme(
        item_word="thread",
        adjectives=_words(
            "help weird quick stupid honest serious beginner advanced urgent old new unpopular"
        ),
        nouns=_words(
            "question problem opinion build setup upgrade issue idea review rant guide "
            "recommendation"
        ),
        categories=_words("general hardware software gaming offtopic marketplace help"),
        brands=_words("mod admin member veteran newbie"),
        filler=_FILLER,
    ),
}

COLORS = ("red", "blue", "green", "black", "white", "grey", "navy", "olive", "sand", "pink")
SIZES = ("xs", "s", "m", "l", "xl", "xxl")
CITIES = _words(
    "berlin paris london madrid rome vienna oslo lisbon prague dublin warsaw amsterdam zurich"
)

UI_WORDS: dict[str, tuple[str, str, str, str]] = {
    "en": ("Price", "Description", "Details", "Add to cart"),
    "de": ("Preis", "Beschreibung", "Einzelheiten", "In den Warenkorb"),
    "fr": ("Prix", "Description du produit", "Détails", "Ajouter au panier"),
    "es": ("Precio", "Descripción", "Detalles", "Añadir al carrito"),
    "ja": ("価格", "説明", "詳細", "カートに入れる"),
    "nl": ("Prijs", "Omschrijving", "Details van het item", "In winkelwagen"),
    "sv": ("Pris", "Beskrivning", "Detaljer", "Lägg i varukorg"),
    "it": ("Prezzo", "Descrizione", "Dettagli", "Aggiungi al carrello"),
}

CURRENCIES: dict[str, tuple[str, float]] = {
    "USD": ("$", 1.0),
    "EUR": ("€", 0.92),
    "GBP": ("£", 0.79),
    "CHF": ("CHF ", 0.88),
    "SEK": ("SEK ", 10.4),
    "us": ("$", 1.0),
    "uk": ("£", 0.79),
    "de": ("€", 0.92),
    "fr": ("€", 0.93),
    "eu": ("€", 0.92),
    "ch": ("CHF ", 0.88),
}

UTM_SOURCES = _words(
    "newsletter facebook google twitter linkedin instagram partner email bing reddit "
    "tiktok pinterest"
)
UTM_MEDIUMS = _words("email cpc social display referral affiliate organic push")
CAMPAIGN_WORDS = _words(
    "spring summer autumn winter blackfriday launch retarget brand promo weekly digest clearance"
)
REF_SOURCES = _words("homepage footer nav search email related widget sidebar app")
AD_SPONSORS = _words("Brightmobile QuickLoans FlyCheap Streamly MegaMart Vitaboost Homey Gigabank")

PROMO_LINES = (
    ("Summer sale", "Our biggest sale of the season has started.", "Shop the sale"),
    ("Members save more", "Join for free and unlock member-only prices.", "Join now"),
    ("Free next-day delivery", "Order before 10pm and get it tomorrow.", "Find out more"),
    ("New collection", "Fresh picks just landed in store.", "Discover"),
    ("Refer a friend", "Give 10, get 10 when your friend orders.", "Invite friends"),
    ("Download our app", "Track orders and get app-only deals.", "Get the app"),
    ("Gift guide", "Ideas for everyone on your list.", "See the guide"),
    ("Last chance", "Final reductions end this weekend.", "Shop now"),
    ("Weekly newsletter", "The best stories and deals in your inbox.", "Subscribe"),
    ("Trade in and save", "Bring your old one and save on a new one.", "Learn how"),
)
