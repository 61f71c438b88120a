"""Check one language folder of data/reference/i18n against the spec. Usage: python check_i18n.py <lang>"""
import csv, json, sys, pathlib
root = pathlib.Path(__file__).resolve().parents[1] / "data" / "reference"
lang = sys.argv[1]
d = root / "i18n" / lang
concepts = list(csv.DictReader(open(root / "concepts.csv", encoding="utf-8")))
countries = list(csv.DictReader(open(root / "countries.csv", encoding="utf-8")))
meta = json.load(open(d / "language.json", encoding="utf-8"))
assert meta["code"] == lang, meta
for k in ("code", "name", "native_name", "descriptor_template", "notes"):
    assert isinstance(meta.get(k), str) and meta[k].strip(), k
def check_template(t, where):
    assert "{concept}" in t and "{country}" in t, (where, t)
    t.format(concept="X", country="Y")
check_template(meta["descriptor_template"], "language.json")
rows = list(csv.DictReader(open(d / "concepts.csv", encoding="utf-8")))
assert [r["concept_id"] for r in rows] == [c["concept_id"] for c in concepts], "concept ids/order must match concepts.csv"
assert [r["concept"] for r in rows] == [c["concept"] for c in concepts], "English concept column must match concepts.csv"
assert list(rows[0].keys()) == ["concept_id", "concept", "text", "descriptor_template", "review_status"], list(rows[0].keys())
for r in rows:
    assert r["text"].strip() and r["text"] == r["text"].strip(), r
    assert r["review_status"] == "awaiting_native_review", r
    if r["descriptor_template"]:
        check_template(r["descriptor_template"], r["concept"])
crow = list(csv.DictReader(open(d / "countries.csv", encoding="utf-8")))
assert list(crow[0].keys()) == ["iso2", "country", "name", "descriptor_country"], list(crow[0].keys())
assert [r["iso2"] for r in crow] == [c["iso2"] for c in countries], "country order must match countries.csv"
assert [r["country"] for r in crow] == [c["name"] for c in countries]
for r in crow:
    assert r["name"].strip() and r["descriptor_country"].strip(), r
texts = [r["text"] for r in rows]
dups = {t for t in texts if texts.count(t) > 1}
print(f"{lang}: OK, {len(rows)} concepts, {len(crow)} countries; duplicate translations (check they are intended): {sorted(dups)}")
t = meta["descriptor_template"]
jp = next(r for r in crow if r["iso2"] == "JP")
train = next(r for r in rows if r["concept"] == "train")
print("example RQ3 descriptor:", (train["descriptor_template"] or t).format(concept=train["text"], country=jp["descriptor_country"]))
