"""Write the `globalrg` reference pack (examples/packs/globalrg/): GlobalRG's 49 countries in its 10 regions and its
20 universals, with a query language per country and drafts of the country names in each of the 29 languages.

    .venv/bin/python examples/packs/make_globalrg_pack.py [target]

Country names come from CLDR (Babel) unless NAME_OVERRIDES says otherwise (each override says why); descriptor forms
and the three demo concepts are drafted here, every row `awaiting_native_review`. The output is deterministic: run
it again and the files are byte for byte the same. It writes only under the target folder (default: the pack folder
beside this script), replacing the pack files it writes.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import unicodedata
from pathlib import Path

from babel import Locale

PACK_NAME = "globalrg"
VERSION = "0.1.0"
REVIEW = "awaiting_native_review"
DEMO_CONCEPTS = ["dance", "festival", "transport"]

#: GlobalRG, Table 1 (project page, static/images/task1-cultures.png), in the table's order:
#: (region, country as the table writes it, ISO 3166-1 alpha-2, query language, DuckDuckGo region).
COUNTRIES: list[tuple[str, str, str, str, str]] = [
    ("East Asia", "China", "CN", "zh", "cn-zh"),
    ("East Asia", "South Korea", "KR", "ko", "kr-kr"),
    ("East Asia", "Japan", "JP", "ja", "jp-jp"),
    ("South East Asia", "Vietnam", "VN", "vi", "vn-vi"),
    ("South East Asia", "Thailand", "TH", "th", "th-th"),
    ("South East Asia", "Philippines", "PH", "fil", "ph-tl"),
    ("South East Asia", "Indonesia", "ID", "id", "id-id"),
    ("South East Asia", "Singapore", "SG", "en", "sg-en"),
    ("South Asia", "India", "IN", "hi", "in-en"),
    ("South Asia", "Pakistan", "PK", "ur", "wt-wt"),
    ("South Asia", "Sri Lanka", "LK", "si", "wt-wt"),
    ("Middle East Asia", "Saudi Arabia", "SA", "ar", "xa-ar"),
    ("Middle East Asia", "Iran", "IR", "fa", "wt-wt"),
    ("Middle East Asia", "Turkey", "TR", "tr", "tr-tr"),
    ("Middle East Asia", "Lebanon", "LB", "ar", "xa-ar"),
    ("Middle East Asia", "Egypt", "EG", "ar", "xa-ar"),
    ("Europe", "Italy", "IT", "it", "it-it"),
    ("Europe", "Greece", "GR", "el", "gr-el"),
    ("Europe", "France", "FR", "fr", "fr-fr"),
    ("Europe", "Germany", "DE", "de", "de-de"),
    ("Europe", "Netherlands", "NL", "nl", "nl-nl"),
    ("Europe", "Portugal", "PT", "pt", "pt-pt"),
    ("Europe", "Spain", "ES", "es", "es-es"),
    ("Europe", "United Kingdom", "GB", "en", "uk-en"),
    ("Europe", "Poland", "PL", "pl", "pl-pl"),
    ("Europe", "Sweden", "SE", "sv", "se-sv"),
    ("Europe", "Hungary", "HU", "hu", "hu-hu"),
    ("Europe", "Bulgaria", "BG", "bg", "bg-bg"),
    ("Europe", "Russia", "RU", "ru", "ru-ru"),
    ("Africa", "Tanzania", "TZ", "sw", "wt-wt"),
    ("Africa", "Kenya", "KE", "sw", "wt-wt"),
    ("Africa", "Uganda", "UG", "en", "wt-wt"),
    ("Africa", "Ghana", "GH", "en", "wt-wt"),
    ("Africa", "Nigeria", "NG", "yo", "wt-wt"),
    ("Africa", "Ethiopia", "ET", "am", "wt-wt"),
    ("Africa", "South Africa", "ZA", "en", "za-en"),
    ("Africa", "Morocco", "MA", "ar", "xa-ar"),
    ("Africa", "Tunisia", "TN", "ar", "xa-ar"),
    ("Latin America", "Brazil", "BR", "pt", "br-pt"),
    ("Latin America", "Peru", "PE", "es", "pe-es"),
    ("Latin America", "Chile", "CL", "es", "cl-es"),
    ("Latin America", "Argentina", "AR", "es", "ar-es"),
    ("Latin America", "Mexico", "MX", "es", "mx-es"),
    ("Caribbean", "Jamaica", "JM", "en", "wt-wt"),
    ("Oceania", "Australia", "AU", "en", "au-en"),
    ("Oceania", "New Zealand", "NZ", "en", "nz-en"),
    ("Oceania", "Fiji", "FJ", "en", "wt-wt"),
    ("North America", "USA", "US", "en", "us-en"),
    ("North America", "Canada", "CA", "en", "ca-en"),
]

#: GlobalRG's universals (project page, static/images/task1-universals.png), read column by column.
CONCEPTS = [
    "breakfast", "dessert", "eating habits", "funeral", "instrument", "music", "sports",
    "clothing", "dinner", "farming", "greetings", "lunch", "religion", "transport",
    "dance", "drinks", "festival", "head coverings", "marriage", "ritual",
]  # fmt: skip

# fmt: off
#: Country names where CLDR's form is not the one to use; each group says why.
NAME_OVERRIDES: dict[str, dict[str, str]] = {
    # The table's own English name; CLDR 44+ writes "Türkiye", English search text mostly "Turkey".
    "en": {"TR": "Turkey"},
    "fil": {"TR": "Turkey"},
    # The shipped default pack's form for the same language and country, so both packs query alike.
    "ar": {"SA": "السعودية"},
    "de": {"US": "USA"},
    "es": {"SA": "Arabia Saudita"},
    "hi": {"GB": "ब्रिटेन", "US": "अमेरिका", "TR": "तुर्की"},  # TR: everyday Hindi (CLDR तुर्किये)
    "ja": {"US": "アメリカ"},
    "sw": {"CN": "China", "TH": "Uthai", "ES": "Hispania", "GB": "Uingereza", "AR": "Argentina"},
    "th": {"GB": "อังกฤษ", "US": "อเมริกา"},
    "yo": {
        "JP": "Jàpáànù", "AU": "Ọsirélíà", "IN": "Índíà", "FR": "Faransé", "KE": "Kẹ́ńyà", "TH": "Tàílándì",
        "SA": "Sáúdí Arábíà", "US": "Amẹ́ríkà", "GB": "Ilẹ̀ Gẹ̀ẹ́sì",
        # CLDR swaps the Koreas in Yoruba (KR "Ariwa Kọria" = North, KP "Guusu Kọria" = South); CLDR's own
        # spelling of "south" (ZA: Gúúṣù Áfíríkà) is used.
        "KR": "Gúúṣù Kọria",
    },
    # The everyday short form where CLDR has the official long one.
    "ko": {"KR": "한국", "AU": "호주"},
    "ur": {"US": "امریکہ", "GB": "برطانیہ"},
    "ru": {"KR": "Южная Корея", "ZA": "ЮАР", "US": "США"},
    "bg": {"US": "САЩ"},
    "el": {"NL": "Ολλανδία"},
    "am": {"US": "አሜሪካ"},
    # Iranian spelling (CLDR's افریقا is the Afghan (Dari) one).
    "fa": {"ZA": "آفریقای جنوبی"},
}

#: descriptor_country where it is not the plain name: {language: {iso2: form}}; LANGUAGE_DESCRIPTORS fills the rest.
DESCRIPTORS: dict[str, dict[str, str]] = {
    "en": {"PH": "the Philippines", "NL": "the Netherlands", "GB": "the United Kingdom", "US": "the United States"},
    "fr": {
        "CN": "de Chine", "KR": "de Corée du Sud", "JP": "du Japon", "VN": "du Viêt Nam", "TH": "de Thaïlande",
        "PH": "des Philippines", "ID": "d'Indonésie", "SG": "de Singapour", "IN": "d'Inde", "PK": "du Pakistan",
        "LK": "du Sri Lanka", "SA": "d'Arabie saoudite", "IR": "d'Iran", "TR": "de Turquie", "LB": "du Liban",
        "EG": "d'Égypte", "IT": "d'Italie", "GR": "de Grèce", "FR": "de France", "DE": "d'Allemagne",
        "NL": "des Pays-Bas", "PT": "du Portugal", "ES": "d'Espagne", "GB": "du Royaume-Uni", "PL": "de Pologne",
        "SE": "de Suède", "HU": "de Hongrie", "BG": "de Bulgarie", "RU": "de Russie", "TZ": "de Tanzanie",
        "KE": "du Kenya", "UG": "d'Ouganda", "GH": "du Ghana", "NG": "du Nigeria", "ET": "d'Éthiopie",
        "ZA": "d'Afrique du Sud", "MA": "du Maroc", "TN": "de Tunisie", "BR": "du Brésil", "PE": "du Pérou",
        "CL": "du Chili", "AR": "d'Argentine", "MX": "du Mexique", "JM": "de Jamaïque", "AU": "d'Australie",
        "NZ": "de Nouvelle-Zélande", "FJ": "des Fidji", "US": "des États-Unis", "CA": "du Canada",
    },
    # es: "de " + name, except these.
    "es": {
        "IN": "de la India", "LB": "del Líbano", "NL": "de los Países Bajos", "GB": "del Reino Unido",
        "PE": "del Perú",
    },
    "pt": {
        "CN": "da China", "KR": "da Coreia do Sul", "JP": "do Japão", "VN": "do Vietnã", "TH": "da Tailândia",
        "PH": "das Filipinas", "ID": "da Indonésia", "SG": "de Singapura", "IN": "da Índia", "PK": "do Paquistão",
        "LK": "do Sri Lanka", "SA": "da Arábia Saudita", "IR": "do Irã", "TR": "da Turquia", "LB": "do Líbano",
        "EG": "do Egito", "IT": "da Itália", "GR": "da Grécia", "FR": "da França", "DE": "da Alemanha",
        "NL": "dos Países Baixos", "PT": "de Portugal", "ES": "da Espanha", "GB": "do Reino Unido", "PL": "da Polônia",
        "SE": "da Suécia", "HU": "da Hungria", "BG": "da Bulgária", "RU": "da Rússia", "TZ": "da Tanzânia",
        "KE": "do Quênia", "UG": "de Uganda", "GH": "de Gana", "NG": "da Nigéria", "ET": "da Etiópia",
        "ZA": "da África do Sul", "MA": "do Marrocos", "TN": "da Tunísia", "BR": "do Brasil", "PE": "do Peru",
        "CL": "do Chile", "AR": "da Argentina", "MX": "do México", "JM": "da Jamaica", "AU": "da Austrália",
        "NZ": "da Nova Zelândia", "FJ": "de Fiji", "US": "dos Estados Unidos", "CA": "do Canadá",
    },
    "it": {
        "CN": "della Cina", "KR": "della Corea del Sud", "JP": "del Giappone", "VN": "del Vietnam",
        "TH": "della Thailandia", "PH": "delle Filippine", "ID": "dell'Indonesia", "SG": "di Singapore",
        "IN": "dell'India", "PK": "del Pakistan", "LK": "dello Sri Lanka", "SA": "dell'Arabia Saudita",
        "IR": "dell'Iran", "TR": "della Turchia", "LB": "del Libano", "EG": "dell'Egitto", "IT": "dell'Italia",
        "GR": "della Grecia", "FR": "della Francia", "DE": "della Germania", "NL": "dei Paesi Bassi",
        "PT": "del Portogallo", "ES": "della Spagna", "GB": "del Regno Unito", "PL": "della Polonia",
        "SE": "della Svezia", "HU": "dell'Ungheria", "BG": "della Bulgaria", "RU": "della Russia",
        "TZ": "della Tanzania", "KE": "del Kenya", "UG": "dell'Uganda", "GH": "del Ghana", "NG": "della Nigeria",
        "ET": "dell'Etiopia", "ZA": "del Sudafrica", "MA": "del Marocco", "TN": "della Tunisia", "BR": "del Brasile",
        "PE": "del Perù", "CL": "del Cile", "AR": "dell'Argentina", "MX": "del Messico", "JM": "della Giamaica",
        "AU": "dell'Australia", "NZ": "della Nuova Zelanda", "FJ": "delle Figi", "US": "degli Stati Uniti",
        "CA": "del Canada",
    },
    "de": {
        "PH": "den Philippinen", "IR": "dem Iran", "TR": "der Türkei", "LB": "dem Libanon", "NL": "den Niederlanden",
        "GB": "dem Vereinigten Königreich", "US": "den USA",
    },
    "nl": {"PH": "de Filipijnen", "GB": "het Verenigd Koninkrijk", "US": "de Verenigde Staten"},
    "el": {
        "CN": "της Κίνας", "KR": "της Νότιας Κορέας", "JP": "της Ιαπωνίας", "VN": "του Βιετνάμ",
        "TH": "της Ταϊλάνδης", "PH": "των Φιλιππινών", "ID": "της Ινδονησίας", "SG": "της Σιγκαπούρης",
        "IN": "της Ινδίας", "PK": "του Πακιστάν", "LK": "της Σρι Λάνκα", "SA": "της Σαουδικής Αραβίας",
        "IR": "του Ιράν", "TR": "της Τουρκίας", "LB": "του Λιβάνου", "EG": "της Αιγύπτου", "IT": "της Ιταλίας",
        "GR": "της Ελλάδας", "FR": "της Γαλλίας", "DE": "της Γερμανίας", "NL": "της Ολλανδίας",
        "PT": "της Πορτογαλίας", "ES": "της Ισπανίας", "GB": "του Ηνωμένου Βασιλείου", "PL": "της Πολωνίας",
        "SE": "της Σουηδίας", "HU": "της Ουγγαρίας", "BG": "της Βουλγαρίας", "RU": "της Ρωσίας",
        "TZ": "της Τανζανίας", "KE": "της Κένυας", "UG": "της Ουγκάντα", "GH": "της Γκάνας", "NG": "της Νιγηρίας",
        "ET": "της Αιθιοπίας", "ZA": "της Νότιας Αφρικής", "MA": "του Μαρόκου", "TN": "της Τυνησίας",
        "BR": "της Βραζιλίας", "PE": "του Περού", "CL": "της Χιλής", "AR": "της Αργεντινής", "MX": "του Μεξικού",
        "JM": "της Τζαμάικας", "AU": "της Αυστραλίας", "NZ": "της Νέας Ζηλανδίας", "FJ": "των Φίτζι",
        "US": "των Ηνωμένων Πολιτειών", "CA": "του Καναδά",
    },
    "pl": {
        "CN": "Chin", "KR": "Korei Południowej", "JP": "Japonii", "VN": "Wietnamu", "TH": "Tajlandii",
        "PH": "Filipin", "ID": "Indonezji", "SG": "Singapuru", "IN": "Indii", "PK": "Pakistanu", "LK": "Sri Lanki",
        "SA": "Arabii Saudyjskiej", "IR": "Iranu", "TR": "Turcji", "LB": "Libanu", "EG": "Egiptu", "IT": "Włoch",
        "GR": "Grecji", "FR": "Francji", "DE": "Niemiec", "NL": "Holandii", "PT": "Portugalii", "ES": "Hiszpanii",
        "GB": "Wielkiej Brytanii", "PL": "Polski", "SE": "Szwecji", "HU": "Węgier", "BG": "Bułgarii", "RU": "Rosji",
        "TZ": "Tanzanii", "KE": "Kenii", "UG": "Ugandy", "GH": "Ghany", "NG": "Nigerii", "ET": "Etiopii",
        "ZA": "Republiki Południowej Afryki", "MA": "Maroka", "TN": "Tunezji", "BR": "Brazylii", "PE": "Peru",
        "CL": "Chile", "AR": "Argentyny", "MX": "Meksyku", "JM": "Jamajki", "AU": "Australii",
        "NZ": "Nowej Zelandii", "FJ": "Fidżi", "US": "Stanów Zjednoczonych", "CA": "Kanady",
    },
    "ru": {
        "CN": "Китая", "KR": "Южной Кореи", "JP": "Японии", "VN": "Вьетнама", "TH": "Таиланда", "PH": "Филиппин",
        "ID": "Индонезии", "SG": "Сингапура", "IN": "Индии", "PK": "Пакистана", "LK": "Шри-Ланки",
        "SA": "Саудовской Аравии", "IR": "Ирана", "TR": "Турции", "LB": "Ливана", "EG": "Египта", "IT": "Италии",
        "GR": "Греции", "FR": "Франции", "DE": "Германии", "NL": "Нидерландов", "PT": "Португалии", "ES": "Испании",
        "GB": "Великобритании", "PL": "Польши", "SE": "Швеции", "HU": "Венгрии", "BG": "Болгарии", "RU": "России",
        "TZ": "Танзании", "KE": "Кении", "UG": "Уганды", "GH": "Ганы", "NG": "Нигерии", "ET": "Эфиопии",
        "ZA": "ЮАР", "MA": "Марокко", "TN": "Туниса", "BR": "Бразилии", "PE": "Перу", "CL": "Чили",
        "AR": "Аргентины", "MX": "Мексики", "JM": "Ямайки", "AU": "Австралии", "NZ": "Новой Зеландии",
        "FJ": "Фиджи", "US": "США", "CA": "Канады",
    },
    "bg": {"PH": "Филипините"},
    "sv": {"PH": "Filippinernas", "NL": "Nederländernas", "US": "USA:s"},  # the rest: name + "s"
    "tr": {
        "CN": "Çin'deki", "KR": "Güney Kore'deki", "JP": "Japonya'daki", "VN": "Vietnam'daki", "TH": "Tayland'daki",
        "PH": "Filipinler'deki", "ID": "Endonezya'daki", "SG": "Singapur'daki", "IN": "Hindistan'daki",
        "PK": "Pakistan'daki", "LK": "Sri Lanka'daki", "SA": "Suudi Arabistan'daki", "IR": "İran'daki",
        "TR": "Türkiye'deki", "LB": "Lübnan'daki", "EG": "Mısır'daki", "IT": "İtalya'daki", "GR": "Yunanistan'daki",
        "FR": "Fransa'daki", "DE": "Almanya'daki", "NL": "Hollanda'daki", "PT": "Portekiz'deki",
        "ES": "İspanya'daki", "GB": "Birleşik Krallık'taki", "PL": "Polonya'daki", "SE": "İsveç'teki",
        "HU": "Macaristan'daki", "BG": "Bulgaristan'daki", "RU": "Rusya'daki", "TZ": "Tanzanya'daki",
        "KE": "Kenya'daki", "UG": "Uganda'daki", "GH": "Gana'daki", "NG": "Nijerya'daki", "ET": "Etiyopya'daki",
        "ZA": "Güney Afrika'daki", "MA": "Fas'taki", "TN": "Tunus'taki", "BR": "Brezilya'daki", "PE": "Peru'daki",
        "CL": "Şili'deki", "AR": "Arjantin'deki", "MX": "Meksika'daki", "JM": "Jamaika'daki",
        "AU": "Avustralya'daki", "NZ": "Yeni Zelanda'daki", "FJ": "Fiji'deki",
        "US": "Amerika Birleşik Devletleri'ndeki", "CA": "Kanada'daki",
    },
    "hu": {
        "CN": "Kínában", "KR": "Dél-Koreában", "JP": "Japánban", "VN": "Vietnámban", "TH": "Thaiföldön",
        "PH": "a Fülöp-szigeteken", "ID": "Indonéziában", "SG": "Szingapúrban", "IN": "Indiában",
        "PK": "Pakisztánban", "LK": "Srí Lankán", "SA": "Szaúd-Arábiában", "IR": "Iránban", "TR": "Törökországban",
        "LB": "Libanonban", "EG": "Egyiptomban", "IT": "Olaszországban", "GR": "Görögországban",
        "FR": "Franciaországban", "DE": "Németországban", "NL": "Hollandiában", "PT": "Portugáliában",
        "ES": "Spanyolországban", "GB": "az Egyesült Királyságban", "PL": "Lengyelországban", "SE": "Svédországban",
        "HU": "Magyarországon", "BG": "Bulgáriában", "RU": "Oroszországban", "TZ": "Tanzániában", "KE": "Kenyában",
        "UG": "Ugandában", "GH": "Ghánában", "NG": "Nigériában", "ET": "Etiópiában",
        "ZA": "a Dél-afrikai Köztársaságban", "MA": "Marokkóban", "TN": "Tunéziában", "BR": "Brazíliában",
        "PE": "Peruban", "CL": "Chilében", "AR": "Argentínában", "MX": "Mexikóban", "JM": "Jamaicán",
        "AU": "Ausztráliában", "NZ": "Új-Zélandon", "FJ": "a Fidzsi-szigeteken", "US": "az Egyesült Államokban",
        "CA": "Kanadában",
    },
    "si": {"PE": "පේරුවේ", "CL": "චිලියේ", "FJ": "ෆීජියේ"},  # the rest: the name's genitive in -යේ / -වේ
    "yo": {"GB": "Gẹ̀ẹ́sì"},  # the template already says ilẹ̀
}
# fmt: on


def _descriptor(code: str, iso2: str, name: str) -> str:
    own = DESCRIPTORS.get(code, {})
    if iso2 in own:
        return own[iso2]
    if code == "es":
        return f"de {name}"
    if code == "sv":
        return name if name.endswith(("s", "x", "z")) else f"{name}s"
    if code == "si":
        if name.endswith(("ය", "ව")):
            return name + "\u0dda"  # the genitive ending -ē: ජපානය -> ජපානයේ
        raise ValueError(f"si: no genitive rule for {name!r}")
    for strict in ("fr", "pt", "it", "el", "pl", "ru", "tr", "hu"):
        if code == strict:
            raise ValueError(f"{code}: no descriptor form for {iso2}")
    return name


#: (descriptor_template, notes) per language.
LANGUAGES: dict[str, tuple[str, str]] = {
    "en": (
        "{concept} of {country}",
        "Source language of the concept list (GlobalRG's universals). RQ3 form as in the 3XCM paper, §3.2.3: "
        "\"dance of Japan\". Names are CLDR's except Turkey (CLDR: Türkiye), the table's own name and the one most "
        "English text uses; descriptor_country adds the article where English uses one (the Philippines, the "
        "Netherlands, the United Kingdom, the United States). Queried for Singapore, United Kingdom, Uganda, Ghana, "
        "South Africa, Jamaica, Australia, New Zealand, Fiji, USA and Canada, and as every country's English query.",
    ),
    "zh": (
        "{country}的{concept}",
        "Simplified Chinese, mainland usage. RQ3 descriptor uses the attributive particle 的 "
        "('{country}的{concept}', e.g. 日本的舞蹈), which works for every concept, so no per-concept "
        "overrides. Country names are CLDR's mainland short forms (英国, 美国, 韩国). Concepts: "
        "'dance' = 舞蹈, 'festival' = 节日 (as in the default pack), 'transport' = 交通工具 (means of "
        "transport, the image-search sense; 交通 alone also means traffic).",
    ),
    "ko": (
        "{country}의 {concept}",
        "Standard Korean (South Korea). RQ3 descriptor uses the genitive particle 의 ('{country}의 "
        "{concept}', e.g. 일본의 춤), which works for every concept. Country names are CLDR's except "
        "South Korea = 한국 (CLDR: the official 대한민국) and Australia = 호주 (CLDR: 오스트레일리아), "
        "the everyday forms; 튀르키예 is kept (the form Korean media adopted in 2022). Concepts: "
        "'dance' = 춤, 'festival' = 축제, 'transport' = 교통수단 (means of transport).",
    ),
    "ja": (
        "{country}の{concept}",
        "RQ3 descriptor uses the genitive particle の ('{country}の{concept}', e.g. 日本の踊り), as in "
        "the default pack; no per-concept overrides. Country names are CLDR's except USA = アメリカ "
        "(CLDR: アメリカ合衆国), the default pack's everyday form. Concepts: 'dance' = 踊り and "
        "'festival' = 祭り (as in the default pack), 'transport' = 交通手段 (means of transport; 乗り物 "
        "'vehicles' would be narrower).",
    ),
    "vi": (
        "{concept} {country}",
        "Vietnamese expresses 'X of <country>' by plain juxtaposition (noun + country: 'điệu múa Nhật Bản'); 'của' "
        "('of', possession) would sound odd for a culture's dances or festivals, so the template is '{concept} "
        "{country}' and descriptor_country equals name. Names are CLDR's (Hoa Kỳ for the USA; everyday speech also "
        "says Mỹ; Vương quốc Anh for the United Kingdom). Concepts: 'dance' = điệu múa, 'festival' = lễ hội, "
        "'transport' = phương tiện giao thông (means of transport).",
    ),
    "th": (
        "{concept}ของ{country}",
        "RQ3 descriptor uses ของ ('{concept}ของ{country}', e.g. การเต้นรำของญี่ปุ่น), as in the default pack. Country "
        "names are CLDR's short names except UK = อังกฤษ and USA = อเมริกา, the default pack's everyday forms (CLDR: "
        "สหราชอาณาจักร, สหรัฐอเมริกา). Concepts: 'dance' = การเต้นรำ and 'festival' = เทศกาล (as in the default pack), "
        "'transport' = ยานพาหนะ (vehicles, the word the default pack uses in 'unique transportation').",
    ),
    "fil": (
        "{concept} ng {country}",
        "Filipino (Tagalog-based standard). RQ3 descriptor uses the genitive marker 'ng' ('sayaw ng Japan'); "
        "country names take 'ng' like common nouns in everyday usage ('kultura ng Japan'), so descriptor_country "
        "equals name. CLDR's Filipino names are mostly the English ones (Pilipinas, Timog Korea and Estados Unidos "
        "are Filipino); Turkey replaces CLDR's Türkiye, as in English. Concepts: 'dance' = sayaw, 'festival' = "
        "pagdiriwang (celebration/festival; 'pista' was avoided because it names the Filipino town fiesta), "
        "'transport' = transportasyon.",
    ),
    "id": (
        "{concept} {country}",
        "Indonesian expresses 'X of <country>' by juxtaposition ('tarian Jepang', 'festival Jepang'), so the template "
        "is '{concept} {country}' and descriptor_country equals name. Names are CLDR's (Tiongkok for China, the "
        "official form since 2014; everyday text also writes China; Inggris Raya for the United Kingdom). Concepts: "
        "'dance' = tarian, 'festival' = festival, 'transport' = transportasi.",
    ),
    "hi": (
        "{country} का {concept}",
        "Standard Hindi (Devanagari), NFC, as in the default pack: the genitive postposition का/की/के agrees with the "
        "concept (the head noun), so a feminine concept carries '{country} की {concept}' and a masculine plural one "
        "'{country} के {concept}'; the three demo concepts are masculine singular and take the default का. Country "
        "names are CLDR's except the default pack's ब्रिटेन (UK) and अमेरिका (USA) and the everyday तुर्की (CLDR: "
        "तुर्किये); they do not inflect before the postposition, so descriptor_country equals name. Concepts: "
        "'dance' = नृत्य and 'festival' = त्योहार (as in the default pack), 'transport' = परिवहन.",
    ),
    "ur": (
        "{country} کا {concept}",
        "Standard Urdu (Pakistan), Perso-Arabic script, NFC. Like Hindi, the genitive postposition "
        "کا/کی/کے agrees with the concept: default '{country} کا {concept}' for masculine singular concepts; a "
        "feminine concept needs '{country} کی {concept}' and a masculine plural one '{country} کے {concept}'. The "
        "three demo concepts (رقص, تہوار, نقل و حمل) are masculine and take کا. Country names are CLDR's except "
        "امریکہ (USA; CLDR: the long ریاست ہائے متحدہ امریکہ) and برطانیہ (UK; CLDR: سلطنت متحدہ), the everyday "
        "forms; names do not inflect before the postposition, so descriptor_country equals name.",
    ),
    "si": (
        "{country} {concept}",
        "Standard written Sinhala, NFC (ZWJ kept where the script needs it, as in ශ්‍රී). The RQ3 form puts the "
        "country in the genitive (locative-genitive) case before the concept: 'ශ්‍රී ලංකාවේ නැටුම්' = 'dances of Sri "
        "Lanka'. CLDR's names are the definite forms ending in -ය or -ව, whose genitive adds -ේ (ජපානය -> ජපානයේ, "
        "ශ්‍රී ලංකාව -> ශ්‍රී ලංකාවේ); names ending in another vowel take a glide: පේරු -> පේරුවේ, චිලී -> චිලියේ, ෆීජී -> "
        "ෆීජියේ. So descriptor_country is the genitive and the template is '{country} {concept}'. Concepts: 'dance' "
        "= නැටුම් (dances), 'festival' = උත්සව (festivals), 'transport' = ප්‍රවාහනය.",
    ),
    "ar": (
        "{concept} {country}",
        "Modern Standard Arabic, as in the default pack: the default RQ3 form is an idafa '{concept} {country}' "
        "('رقصات مصر'), the concept indefinite and the country as normally written (with its inherent article where "
        "it has one: الصين، الفلبين، الهند، السعودية، اليونان، البرتغال، المغرب، المكسيك، الولايات المتحدة ...), so "
        "descriptor_country equals name. A concept that holds ال or an adjective cannot head an idafa and carries "
        "'{concept} في {country}' ('in') or '{concept} من {country}' ('from'): 'transport' = وسائل النقل takes 'في'. "
        "'dance' = رقصات and 'festival' = مهرجان as in the default pack. Names are CLDR's except Saudi Arabia = "
        "السعودية, the default pack's usual short form (CLDR: المملكة العربية السعودية). One Arabic query serves "
        "Saudi Arabia, Lebanon, Egypt, Morocco and Tunisia; MSA, not the local varieties (Egyptian, Levantine, "
        "Maghrebi), which people also search in.",
    ),
    "fa": (
        "{concept} {country}",
        "Iranian Persian, NFC, ZWNJ kept where the orthography needs it (سری‌لانکا, حمل‌ونقل). The RQ3 form is an "
        "ezafe construction '{concept} {country}' ('رقص ژاپن'): the ezafe vowel is not written after a consonant, "
        "and after a final silent ه (جشنواره) search text usually leaves it unwritten too (formal: جشنوارهٔ ژاپن), "
        "so no per-concept template is used; descriptor_country equals name. Names are CLDR's except South Africa = "
        "آفریقای جنوبی (Iranian spelling; CLDR's افریقای جنوبی is the Dari one); ایالات متحده is kept (everyday: "
        "آمریکا). Concepts: 'dance' = رقص, 'festival' = جشنواره, 'transport' = حمل‌ونقل.",
    ),
    "tr": (
        "{country} {concept}",
        "Standard Turkish. 'X of <country>' as a genitive-possessive ('Japonya'nın dansı') needs a suffix on the "
        "concept as well as the country, which one slot cannot give; the RQ3 form therefore uses the attributive "
        "locative '-daki/-deki/-taki/-teki' ('in'): '{country} {concept}' with descriptor_country = the name plus "
        "the suffix after an apostrophe, chosen by vowel harmony and the final consonant (Japonya'daki, Türkiye'deki, "
        "İsveç'teki, Fas'taki, Birleşik Krallık'taki; a name ending in a possessive takes -ndeki: Amerika Birleşik "
        "Devletleri'ndeki), e.g. 'Japonya'daki dans' = 'dance in Japan'. It needs no per-concept template. Names are "
        "CLDR's (Hollanda for the Netherlands, Birleşik Krallık for the UK). Concepts: 'dance' = dans, 'festival' = "
        "festival, 'transport' = ulaşım.",
    ),
    "it": (
        "{concept} {country}",
        "RQ3 descriptor '{concept} of {country}' as noun + 'di' complement; 'di' contracts with the country's "
        "article, so descriptor_country carries it: del (Giappone, Brasile, Regno Unito, Kenya, Ghana, Sudafrica), "
        "dello (Sri Lanka), dell' (Italia, India, Iran, Egitto, Uganda, Argentina, Australia, Ungheria ...), della "
        "(Cina, Francia, Spagna, Giamaica ...), dei (Paesi Bassi), delle (Filippine, Figi), degli (Stati Uniti), and "
        "bare 'di' for Singapore (no article). The complement does not agree with the head noun, so no per-concept "
        "overrides. Names are CLDR's. Concepts: 'dance' = danza, 'festival' = festival (the loanword Italian uses for "
        "festival events; 'festa' would also mean party or national day), 'transport' = trasporti.",
    ),
    "el": (
        "{concept} {country}",
        "Modern Greek, monotonic, NFC. RQ3 descriptor: the concept followed by the country in the genitive with its "
        "article ('χορός της Ιαπωνίας'), so descriptor_country is article + genitive: της for feminine names (της "
        "Ελλάδας, της Αιγύπτου), του for masculine and neuter ones (του Καναδά, του Λιβάνου, του Μεξικού, του "
        "Ιράν), των for plurals (των Φιλιππινών, των Φίτζι, των Ηνωμένων Πολιτειών); loan names in -α that do not "
        "decline keep their form (της Σρι Λάνκα, της Ουγκάντα). Names are CLDR's except the Netherlands = Ολλανδία, "
        "the everyday form (CLDR: Κάτω Χώρες). Concepts: 'dance' = χορός, 'festival' = φεστιβάλ, 'transport' = "
        "μεταφορές.",
    ),
    "fr": (
        "{concept} {country}",
        "As in the default pack: noun + 'de' complement, the preposition and article in descriptor_country: du for "
        "masculine names (du Japon, du Liban, du Mexique, du Sri Lanka, du Viêt Nam), des for plurals (des "
        "Philippines, des Pays-Bas, des Fidji, des États-Unis), bare de for feminine names (de Chine, de Grèce, de "
        "Jamaïque), elided to d' before a vowel (d'Iran, d'Ouganda, d'Égypte, d'Afrique du Sud). No per-concept "
        "overrides. Names are CLDR's (Viêt Nam; everyday text also writes Vietnam). Concepts: 'dance' = danse and "
        "'festival' = festival (as in the default pack), 'transport' = transports (French uses the plural for a "
        "country's transport).",
    ),
    "de": (
        "{concept} aus {country}",
        "As in the default pack: 'aus' + dative, descriptor_country carrying the dative article where the name has "
        "one: den USA, dem Vereinigten Königreich, den Niederlanden, den Philippinen, der Türkei, dem Libanon, dem "
        "Iran (also written without article). Names are CLDR's except USA (the default pack's form; CLDR: Vereinigte "
        "Staaten). Concepts: 'dance' = Tanz and 'festival' = Fest (as in the default pack), 'transport' = "
        "Verkehrsmittel (means of transport).",
    ),
    "nl": (
        "{concept} uit {country}",
        "RQ3 descriptor with 'uit' ('from', like the German 'aus': 'dans uit Japan'); 'van' reads as possession. "
        "descriptor_country carries the article where the name has one: de Filipijnen, het Verenigd Koninkrijk, de "
        "Verenigde Staten. Events and systems are located, not from somewhere, so 'festival' and 'transport' carry "
        "'{concept} in {country}' ('festival in Japan', 'vervoer in Japan'); the articles are the same after 'in'. "
        "Names are CLDR's. Concepts: 'dance' = dans, 'festival' = festival, 'transport' = vervoer.",
    ),
    "pt": (
        "{concept} {country}",
        "As in the default pack: Brazilian Portuguese where the varieties differ (one Portuguese query serves Brazil "
        "and Portugal), descriptor_country = 'de' contracted with the country's article: do (Japão, Canadá, Marrocos, "
        "Peru, Vietnã), da (China, Índia, Jamaica ...), dos/das (Estados Unidos, Países Baixos, Filipinas), bare de "
        "where Brazilian usage has no article (Portugal, Singapura, Uganda, Gana, Fiji; European Portuguese says do "
        "Uganda, do Gana). Names are CLDR's pt (= pt-BR: Vietnã, Irã, Polônia, Quênia; pt-PT writes Vietname, Irão, "
        "Polónia, Quénia). Concepts: 'dance' = dança and 'festival' = festival (as in the default pack), "
        "'transport' = transporte.",
    ),
    "es": (
        "{concept} {country}",
        "As in the default pack: noun + 'de' complement kept in descriptor_country, because 'de' + 'el' contracts: "
        "del Reino Unido, del Líbano, del Perú (the article is usual in Peru itself); de la India, de los Países "
        "Bajos; Estados Unidos without article. Neutral pan-Hispanic vocabulary; one Spanish query serves Spain, "
        "Peru, Chile, Argentina and Mexico. Names are CLDR's except Arabia Saudita (the default pack's form, usual in "
        "Latin America; CLDR es: Arabia Saudí). Concepts: 'dance' = baile and 'festival' = festival (as in the "
        "default pack), 'transport' = transporte.",
    ),
    "pl": (
        "{concept} {country}",
        "RQ3 descriptor: the concept followed by the country in the genitive ('taniec Japonii'), so "
        "descriptor_country is the genitive: Chin, Niemiec, Włoch, Węgier, Filipin, Stanów Zjednoczonych, Wielkiej "
        "Brytanii, Republiki Południowej Afryki, Korei Południowej, Nowej Zelandii; Peru, Chile and Fidżi do not "
        "decline. The genitive does not agree with the head noun, so no per-concept overrides; for events a "
        "native speaker may prefer 'w' + locative ('festiwal w Japonii'). Names are CLDR's. Concepts: 'dance' = "
        "taniec, 'festival' = festiwal, 'transport' = transport.",
    ),
    "sv": (
        "{country} {concept}",
        "RQ3 descriptor: the s-genitive ('Japans dans'), so descriptor_country is the name + s (Kinas, Sveriges, "
        "Nya Zeelands), a plural definite name's genitive (Filippinernas, Nederländernas), and USA:s (colon before "
        "the s of an abbreviation). Names are CLDR's (USA, Storbritannien). Concepts: 'dance' = dans, 'festival' = "
        "festival, 'transport' = transportmedel (means of transport).",
    ),
    "hu": (
        "{concept} {country}",
        "A possessive ('Japán tánca') would need a suffix on the concept; the RQ3 form therefore uses the locative "
        "('in <country>'): '{concept} {country}' with descriptor_country in the inessive -ban/-ben by vowel harmony "
        "(Japánban, Németországban, Chilében), or the superessive -n/-on/-en/-ön that Hungarian uses for itself, "
        "islands and some names (Magyarországon, Thaiföldön, Új-Zélandon, Srí Lankán, Jamaicán, a Fülöp-szigeteken, "
        "a Fidzsi-szigeteken), with the article where the name takes one (az Egyesült Királyságban, az Egyesült "
        "Államokban, a Dél-afrikai Köztársaságban): 'tánc Japánban'. Names are CLDR's. Concepts: 'dance' = tánc, "
        "'festival' = fesztivál, 'transport' = közlekedés.",
    ),
    "bg": (
        "{concept} на {country}",
        "RQ3 descriptor with 'на' ('of': 'танц на Япония'); Bulgarian has no cases, so descriptor_country is the "
        "name, with the definite article where the name takes one after a preposition (Филипините; Обединеното "
        "кралство already has it). Names are CLDR's except USA = САЩ, the everyday form (CLDR: Съединени щати). "
        "Concepts: 'dance' = танц, 'festival' = фестивал, 'transport' = транспорт.",
    ),
    "ru": (
        "{concept} {country}",
        "RQ3 descriptor: the concept followed by the country in the genitive ('танец Японии'); descriptor_country "
        "is the genitive (Китая, Нидерландов, Филиппин, Южной Кореи, Новой Зеландии); Перу, Чили, Марокко, Фиджи and "
        "the abbreviations США and ЮАР do not decline. Names are CLDR's except Южная Корея (CLDR: Республика Корея), "
        "ЮАР (CLDR: Южно-Африканская Республика) and США (CLDR: Соединенные Штаты), the everyday forms. Concepts: "
        "'dance' = танец, 'festival' = фестиваль, 'transport' = транспорт.",
    ),
    "sw": (
        "{concept} ya {country}",
        "Standard Swahili, as in the default pack: the associative particle -a agrees with the concept's noun class; "
        "default 'ya' (class 9: ngoma), 'festival' = tamasha (class 5) carries '{concept} la {country}', 'transport' "
        "= usafiri (class 14) carries '{concept} wa {country}'. No articles, so descriptor_country equals name. Names "
        "are CLDR's except the default pack's China, Uthai, Hispania, Uingereza and Argentina (CLDR: Uchina, "
        "Tailandi, Uhispania, Ufalme wa Muungano, Ajentina). One Swahili query serves Tanzania and Kenya. 'dance' = "
        "ngoma (dance, also drum), as in the default pack.",
    ),
    "yo": (
        "{concept} ilẹ̀ {country}",
        "Standard Yoruba with tone marks and subdots, NFC, as in the default pack: '{concept} ilẹ̀ {country}' ('... "
        "of the land of'), descriptor_country the bare name except the UK (name Ilẹ̀ Gẹ̀ẹ́sì, slot Gẹ̀ẹ́sì). Names are "
        "CLDR's except the default pack's forms for its countries (Jàpáànù, Ọsirélíà, Índíà, Faransé, Kẹ́ńyà, "
        "Tàílándì, Sáúdí Arábíà, Amẹ́ríkà, Ilẹ̀ Gẹ̀ẹ́sì) and South Korea: CLDR's Yoruba names swap the Koreas (KR "
        "'Ariwa Kọria' means North Korea), so KR is Gúúṣù Kọria. Many CLDR Yoruba names lack tone marks (Fẹtinami, "
        "Singapo, Polandi ...): a native reviewer should mark them. Concepts: 'dance' = ijó and 'festival' = "
        "àjọ̀dún (as in the default pack), 'transport' = ọ̀nà ìrìnnà (means of travel).",
    ),
    "am": (
        "የ{country} {concept}",
        "Standard Amharic (Ge'ez script), NFC. The RQ3 form uses the genitive prefix የ- on the country before the "
        "concept ('የጃፓን ጭፈራ' = 'dance of Japan'); the prefix is written joined to the first word of the name, so it "
        "is in the template and descriptor_country equals name (the prefix works on multi-word names: የደቡብ ኮሪያ). "
        "Names are CLDR's except USA = አሜሪካ, the everyday form (CLDR: ዩናይትድ ስቴትስ). Concepts: 'dance' = ጭፈራ, "
        "'festival' = በዓል (holiday, festival), 'transport' = ትራንስፖርት (the usual loanword; መጓጓዣ is the formal "
        "one).",
    ),
}

#: The demo concepts in each language other than English: {language: {concept: (text, descriptor_template)}}.
DEMO_TEXT: dict[str, dict[str, tuple[str, str]]] = {
    "zh": {"dance": ("舞蹈", ""), "festival": ("节日", ""), "transport": ("交通工具", "")},
    "ko": {"dance": ("춤", ""), "festival": ("축제", ""), "transport": ("교통수단", "")},
    "ja": {"dance": ("踊り", ""), "festival": ("祭り", ""), "transport": ("交通手段", "")},
    "vi": {"dance": ("điệu múa", ""), "festival": ("lễ hội", ""), "transport": ("phương tiện giao thông", "")},
    "th": {"dance": ("การเต้นรำ", ""), "festival": ("เทศกาล", ""), "transport": ("ยานพาหนะ", "")},
    "fil": {"dance": ("sayaw", ""), "festival": ("pagdiriwang", ""), "transport": ("transportasyon", "")},
    "id": {"dance": ("tarian", ""), "festival": ("festival", ""), "transport": ("transportasi", "")},
    "hi": {"dance": ("नृत्य", ""), "festival": ("त्योहार", ""), "transport": ("परिवहन", "")},
    "ur": {"dance": ("رقص", ""), "festival": ("تہوار", ""), "transport": ("نقل و حمل", "")},
    "si": {"dance": ("නැටුම්", ""), "festival": ("උත්සව", ""), "transport": ("ප්‍රවාහනය", "")},
    "ar": {"dance": ("رقصات", ""), "festival": ("مهرجان", ""), "transport": ("وسائل النقل", "{concept} في {country}")},
    "fa": {"dance": ("رقص", ""), "festival": ("جشنواره", ""), "transport": ("حمل‌ونقل", "")},
    "tr": {"dance": ("dans", ""), "festival": ("festival", ""), "transport": ("ulaşım", "")},
    "it": {"dance": ("danza", ""), "festival": ("festival", ""), "transport": ("trasporti", "")},
    "el": {"dance": ("χορός", ""), "festival": ("φεστιβάλ", ""), "transport": ("μεταφορές", "")},
    "fr": {"dance": ("danse", ""), "festival": ("festival", ""), "transport": ("transports", "")},
    "de": {"dance": ("Tanz", ""), "festival": ("Fest", ""), "transport": ("Verkehrsmittel", "")},
    "nl": {
        "dance": ("dans", ""),
        "festival": ("festival", "{concept} in {country}"),
        "transport": ("vervoer", "{concept} in {country}"),
    },
    "pt": {"dance": ("dança", ""), "festival": ("festival", ""), "transport": ("transporte", "")},
    "es": {"dance": ("baile", ""), "festival": ("festival", ""), "transport": ("transporte", "")},
    "pl": {"dance": ("taniec", ""), "festival": ("festiwal", ""), "transport": ("transport", "")},
    "sv": {"dance": ("dans", ""), "festival": ("festival", ""), "transport": ("transportmedel", "")},
    "hu": {"dance": ("tánc", ""), "festival": ("fesztivál", ""), "transport": ("közlekedés", "")},
    "bg": {"dance": ("танц", ""), "festival": ("фестивал", ""), "transport": ("транспорт", "")},
    "ru": {"dance": ("танец", ""), "festival": ("фестиваль", ""), "transport": ("транспорт", "")},
    "sw": {
        "dance": ("ngoma", ""),
        "festival": ("tamasha", "{concept} la {country}"),
        "transport": ("usafiri", "{concept} wa {country}"),
    },
    "yo": {"dance": ("ijó", ""), "festival": ("àjọ̀dún", ""), "transport": ("ọ̀nà ìrìnnà", "")},
    "am": {"dance": ("ጭፈራ", ""), "festival": ("በዓል", ""), "transport": ("ትራንስፖርት", "")},
}

NATIVE_NAME_OVERRIDES = {"zh": "中文（简体）"}  # the script, as the default pack writes it

SOURCES = {
    "countries": "GlobalRG (Bhatia et al., 'From Local Concepts to Universals: Evaluating the Multicultural "
    "Understanding of Vision-Language Models', EMNLP 2024), Table 1, as published on the authors' project page "
    "(github.com/globalrg/globalrg.github.io, static/images/task1-cultures.png, commit 4807c63): the 49 countries, "
    "their names and their 10 regions; ISO codes, query languages and DuckDuckGo regions chosen for this pack "
    "(README.md)",
    "concepts": "GlobalRG's 20 universals, project page static/images/task1-universals.png (same commit), read column "
    "by column",
    "i18n": "country and language names from Unicode CLDR via Babel, with the overrides each language.json names; "
    "descriptor forms, templates and the 3 demo concepts' translations drafted for culturebench, every row awaiting "
    "native review; RQ3 descriptor templates after 3XCM paper §3.2.3 and App. R",
}


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                raise ValueError(f"cell {cell!r} starts like a spreadsheet formula")
        writer.writerow([nfc(c) for c in row])
    return buffer.getvalue().encode("utf-8")


def json_bytes(value: object) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def country_name(code: str, iso2: str) -> str:
    return NAME_OVERRIDES.get(code, {}).get(iso2) or Locale.parse(code).territories[iso2]


def build() -> dict[str, bytes]:
    english = Locale("en")
    languages = list(dict.fromkeys(c[3] for c in COUNTRIES))
    assert sorted(languages) == sorted(LANGUAGES), (sorted(languages), sorted(LANGUAGES))
    assert len(COUNTRIES) == 49 and len({c[0] for c in COUNTRIES}) == 10 and len(CONCEPTS) == 20
    files: dict[str, bytes] = {}
    files["pack.json"] = json_bytes(
        {
            "name": PACK_NAME,
            "version": VERSION,
            "licence": "CC BY 4.0 for the pack's own tables and drafts; the country and region list follows GlobalRG's "
            "Table 1 and its universals (EMNLP 2024 paper, CC BY 4.0); country and language names from Unicode CLDR "
            "(Unicode License v3)",
            "description": "GlobalRG's retrieval cultures (Table 1): 49 countries in its 10 regions and its 20 "
            "universals as concepts, one query language per country (29 languages), country names from CLDR and "
            "drafts of every descriptor form and of the 3 demo concepts, all awaiting native review.",
            "sources": SOURCES,
            "demo": {"concepts": DEMO_CONCEPTS, "countries": None},
        }
    )
    files["countries.csv"] = csv_bytes(
        ["name", "iso2", "slug", "language_code", "language_name", "language_group", "ddg_region", "region"],
        [
            [name, iso2, name.lower(), code, english.languages[code], code, ddg, region]
            for region, name, iso2, code, ddg in COUNTRIES
        ],
    )
    files["concepts.csv"] = csv_bytes(["concept_id", "concept"], [[str(i), c] for i, c in enumerate(CONCEPTS)])
    ids = {c: i for i, c in enumerate(CONCEPTS)}
    for code in sorted(LANGUAGES):
        template, notes = LANGUAGES[code]
        locale = Locale.parse(code)
        files[f"i18n/{code}/language.json"] = json_bytes(
            {
                "code": code,
                "name": english.languages[code],
                "native_name": NATIVE_NAME_OVERRIDES.get(code, locale.display_name),
                "descriptor_template": nfc(template),
                "notes": nfc(notes),
            }
        )
        rows = []
        for _, english_name, iso2, _, _ in COUNTRIES:
            name = country_name(code, iso2)
            rows.append([iso2, english_name, name, _descriptor(code, iso2, name), REVIEW])
        files[f"i18n/{code}/countries.csv"] = csv_bytes(
            ["iso2", "country", "name", "descriptor_country", "review_status"], rows
        )
        if code == "en":
            continue
        demo = DEMO_TEXT[code]
        assert sorted(demo) == sorted(DEMO_CONCEPTS), code
        files[f"i18n/{code}/concepts.csv"] = csv_bytes(
            ["concept_id", "concept", "text", "descriptor_template", "review_status"],
            [[str(ids[c]), c, demo[c][0], demo[c][1], REVIEW] for c in sorted(demo, key=ids.__getitem__)],
        )
    return files


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / PACK_NAME
    for relative, data in build().items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote {path} ({len(data):,} bytes)")


if __name__ == "__main__":
    main()
