"""Near-miss twins (capgap.data.edits / capgap.data.twins, capgap.nearmiss): the edit rules on fixed sentences, the seeded generator,
the canonical twins.tsv, the ``near_miss`` hook, and the twin rows of BM25, the probe and
evaluate_scores, each against values derived by hand."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import capgap
from capgap import bm25
from capgap import probe as probe_mod
from capgap.data import (
    EDITS,
    Corpus,
    Qrels,
    Queries,
    RetrievalSet,
    Split,
    add_twins,
    flip_spatial,
    load_canonical,
    load_twins,
    negate,
    swap_roles,
    twin_counts,
    twin_id,
    why_not,
    write_canonical,
)
from capgap.data import TWIN_TYPES as TYPES
from capgap.errors import DataFormatError
from capgap.evaluate import evaluate_scores
from capgap.generate import NEAR_MISS_RELATIONS, NEAR_MISS_SPATIAL, generate_near_miss
from capgap.sources import obtain

from ..conftest import write_jsonl

SMALL = {"n_people": 12, "n_train": 30, "n_heldout": 20}


# ---------------------------------------------------------------- edit rules
@pytest.mark.parametrize(
    "sentence,expected",
    [
        ("Alice trusts Bob.", "Alice does not trust Bob."),
        ("Alice is left of Bob.", "Alice is not left of Bob."),
        ("Mary Jane teaches Tom.", "Mary Jane does not teach Tom."),
        ("Alice watches Bob.", "Alice does not watch Bob."),
        ("Alice carries Bob.", "Alice does not carry Bob."),
        ("Alice has Bob.", "Alice does not have Bob."),
        ("Alice goes with Bob.", "Alice does not go with Bob."),
        ("Alice misses Bob.", "Alice does not miss Bob."),
        ("Alice arrives before Bob.", "Alice does not arrive before Bob."),
        ("Alice can see Bob!", "Alice can not see Bob!"),
        ("Alice was behind Bob", "Alice was not behind Bob"),  # no terminal punctuation: none added
        ("Alice has seen Bob.", "Alice has not seen Bob."),  # the perfect: has is the auxiliary
        ("Alice had helped Bob.", "Alice had not helped Bob."),
        ("Alice unties Bob.", "Alice does not untie Bob."),  # IE_VERBS: not "unty"
        ("Jean-Luc trusts O'Brien.", "Jean-Luc does not trust O'Brien."),  # hyphen and apostrophe names
        ("Zoë trusts Élodie.", "Zoë does not trust Élodie."),
        ("Alice helps Charles.", "Alice does not help Charles."),  # a name ending in -s is not a second verb
    ],
)
def test_negate(sentence, expected):
    assert negate(sentence) == expected
    assert why_not(sentence, "negation") is None


@pytest.mark.parametrize(
    "sentence,expected",
    [
        ("Alice trusts Bob Smith.", "Bob Smith trusts Alice."),
        ("Alice trusts Bob.", "Bob trusts Alice."),
        ("Mary Jane is in front of Tom.", "Tom is in front of Mary Jane."),
        ("Alice does not trust Bob.", "Bob does not trust Alice."),
    ],
)
def test_swap_roles(sentence, expected):
    assert swap_roles(sentence) == expected
    assert swap_roles(swap_roles(sentence)) == sentence


@pytest.mark.parametrize(
    "a,b",
    [
        ("Alice is left of Bob.", "Alice is right of Bob."),
        ("Alice is in front of Bob.", "Alice is behind Bob."),
        ("Alice is above Bob.", "Alice is below Bob."),
        ("Alice arrives before Bob.", "Alice arrives after Bob."),
        ("Alice lives north of Bob.", "Alice lives south of Bob."),
        ("Before noon Alice calls Bob.", "After noon Alice calls Bob."),  # capitalisation kept
    ],
)
def test_flip_spatial_both_ways(a, b):
    assert flip_spatial(a) == b and flip_spatial(b) == a
    assert flip_spatial(flip_spatial(a)) == a


NOT_NAMES = "not '<Name> <lower-case words> <Name>'"
NO_VERB = "no auxiliary or third-person verb right after a capitalised subject"


@pytest.mark.parametrize(
    "sentence,kind,reason",
    [
        ("Alice does not trust Bob.", "negation", "already negated"),
        ("Alice never trusts Bob.", "negation", "already negated"),
        ("Alice isn't left of Bob.", "negation", "already negated"),
        ("Alice trusts Bob. Bob trusts Carl.", "negation", "not one sentence"),
        ("Alice trusts Bob. Bob trusts Carl.", "role_swap", "not one sentence"),
        ("Alice is left of Bob; Bob is left of Carl.", "spatial_flip", "not one sentence"),
        ("the cat chases the mouse.", "negation", NO_VERB),
        ("the cat chases the mouse.", "role_swap", NOT_NAMES),
        ("Alice kiss Bob.", "negation", NO_VERB),  # "kiss" ends in "ss": not third person
        ("Alice always trusts Bob.", "negation", NO_VERB),  # an adverb in -s is not a verb
        ("Alice perhaps trusts Bob.", "negation", NO_VERB),
        ("Alice as a child trusted Bob.", "negation", NO_VERB),
        ("Alice helps trusts Bob.", "negation", "two verb candidates after the subject (an adverb before the verb?)"),
        ("The box is above Alice.", "negation", NO_VERB),  # "The" is not a name: no name subject
        ("The box is above Alice.", "role_swap", NOT_NAMES),
        ("Yesterday Alice met Bob.", "role_swap", NOT_NAMES),
        ("In Paris Alice trusts Bob.", "role_swap", NOT_NAMES),
        ("Alice's dog bites Bob.", "role_swap", NOT_NAMES),  # a possessive is not a name
        ("Alice, a nurse, trusts Bob.", "role_swap", NOT_NAMES),  # punctuation glued to a name
        ("Alice is LEFT OF Bob.", "role_swap", NOT_NAMES),  # capitals in the middle
        ("Alice focuses Bob.", "negation", "ambiguous verb ending (-ses, -zes, -oes)"),  # focus / focuse?
        ("Alice quizzes Bob.", "negation", "ambiguous verb ending (-ses, -zes, -oes)"),  # quiz / quizze?
        ("Alice canoes past Bob.", "negation", "ambiguous verb ending (-ses, -zes, -oes)"),  # canoe / cano?
        ("Alice trusts the dog.", "role_swap", NOT_NAMES),  # no name at the end
        ("Alice trusts Bob and Carl.", "role_swap", NOT_NAMES),  # a name in the middle
        ("Alice Bob.", "role_swap", NOT_NAMES),  # empty middle
        ("Alice trusts Alice.", "role_swap", "both arguments are the same"),
        ("Alice trusts Bob.", "spatial_flip", "no spatial or order phrase"),
        ("Alice is leftist of Bob.", "spatial_flip", "no spatial or order phrase"),  # whole words only
        ("Alice is left of Bob and above Carl.", "spatial_flip", "several spatial or order phrases"),
    ],
)
def test_skips_and_reasons(sentence, kind, reason):
    assert why_not(sentence, kind) == reason
    assert EDITS[kind](sentence) is None


def test_unknown_type_raises():
    with pytest.raises(ValueError, match="unknown near-miss type"):
        why_not("Alice trusts Bob.", "paraphrase")
    with pytest.raises(ValueError):
        generate_near_miss(types=("paraphrase",), **SMALL)


def test_twin_id():
    assert twin_id("d1", "negation") == "d1~negation"


# ---------------------------------------------------------------- generator
_FAMILY = {v: f for f, (v, _) in enumerate(NEAR_MISS_RELATIONS)}
_FAMILY.update({v: len(NEAR_MISS_RELATIONS) + f for f, fam in enumerate(NEAR_MISS_SPATIAL) for v, _ in fam})
_PARAPHRASE = {v: p for v, p in NEAR_MISS_RELATIONS} | {v: p for fam in NEAR_MISS_SPATIAL for v, p in fam}
_SPATIAL_FAMILIES = set(range(len(NEAR_MISS_RELATIONS), len(NEAR_MISS_RELATIONS) + len(NEAR_MISS_SPATIAL)))


def _parse(text):
    """(A, verb phrase, B) of a generated statement "A <verb phrase> B." (single-word names)."""
    assert text.endswith(".")
    toks = text[:-1].split(" ")
    return toks[0], " ".join(toks[1:-1]), toks[-1]


def test_generate_is_seeded():
    a, ia = generate_near_miss(**SMALL)
    b, ib = generate_near_miss(**SMALL)
    assert a == b and ia == ib
    assert a.twins == b.twins and a.corpus == b.corpus
    c, _ = generate_near_miss(seed=1, **SMALL)
    assert c.corpus != a.corpus


def test_generate_same_across_processes():
    # no set iteration order leaks into the output: two hash seeds, one data set
    code = (
        "import hashlib; from capgap.generate import generate_near_miss as g; rs, _ = g(n_people=12, n_train=30, "
        "n_heldout=20); print(hashlib.sha256(repr((rs.corpus, rs.queries, rs.qrels, rs.split, sorted(rs.twins.items())))"
        ".encode()).hexdigest())"
    )
    src = str(Path(capgap.__file__).resolve().parents[1])
    out = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": src},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(out) == 1


def test_generate_sizes_and_twins():
    rs, info = generate_near_miss(**SMALL)
    text = dict(zip(rs.corpus.ids, rs.corpus.texts))
    statements = sorted(d for d in rs.corpus.ids if "~" not in d)
    assert statements == [f"s{i:04d}" for i in range(50)]
    assert len(rs.queries) == 50 and len(rs.split.train) == 30 and len(rs.split.heldout) == 20
    spatial = [s for s in statements if _FAMILY[_parse(text[s])[1]] in _SPATIAL_FAMILIES]
    # n_spatial = round(0.34 * 50) = 17: train round(17 * 30/50) = 10, held out round(17 * 20/50) = 7
    assert len(spatial) == 17
    assert len(rs.corpus) == 50 + 50 + 50 + 17  # statements + negation + role_swap + spatial_flip
    assert twin_counts(rs) == {"negation": 50, "role_swap": 50, "spatial_flip": 17}
    for s in statements:
        kinds = [k for _, k in rs.twins[s]]
        assert kinds == (["negation", "role_swap", "spatial_flip"] if s in spatial else ["negation", "role_swap"])
        for t, k in rs.twins[s]:
            assert t == twin_id(s, k) and text[t] == EDITS[k](text[s])
    assert len(set(rs.corpus.texts)) == len(rs.corpus)  # no twin repeats another document
    for q, qt in zip(rs.queries.ids, rs.queries.texts):
        gold = rs.qrels.gold(q)
        assert list(gold) == [f"s{q[1:]}"] and gold[f"s{q[1:]}"] == 1
        a, verb, b = _parse(text[f"s{q[1:]}"])
        assert qt == f"{a} {_PARAPHRASE[verb]} {b}"
        # the relation words of the statement are not in the query ("is" / "of" are function words)
        assert not (set(verb.split()) - {"is", "of"}) & set(qt.split())
    assert info["types"] == list(TYPES) and rs.name == "near-miss"


@pytest.mark.parametrize("seed", [0, 3])
def test_generate_entity_relation_split(seed):
    rs, info = generate_near_miss(seed=seed, **SMALL)
    text = dict(zip(rs.corpus.ids, rs.corpus.texts))
    split_of = {q: "train" for q in rs.split.train} | {q: "heldout" for q in rs.split.heldout}
    by = {"train": [], "heldout": []}
    for q in rs.queries.ids:
        (s,) = rs.qrels.gold(q)
        a, verb, b = _parse(text[s])
        by[split_of[q]].append((a, _FAMILY[verb], b))
    train_people = {p for a, _, b in by["train"] for p in (a, b)}
    train_families = {f for _, f, _ in by["train"]}
    for a, f, b in by["heldout"]:
        assert not [t for t in by["train"] if t[1] == f and {a, b} & {t[0], t[2]}], (a, f, b)
        assert a in train_people and b in train_people and f in train_families
    assert info["heldout_people_seen_in_train"] == info["heldout_relations_seen_in_train"] == 20
    # a pair of people is used at most once per relation family
    pairs = [(f, frozenset((a, b))) for split in by.values() for a, f, b in split]
    assert len(set(pairs)) == len(pairs)


def test_generate_impossible_sizes():
    # 4 people, half reserved: one train pair and one held-out pair per family (19 families)
    with pytest.raises(ValueError, match="raise n_people"):
        generate_near_miss(n_people=4, n_train=100, n_heldout=10)


def test_obtain_near_miss_source():
    spec = {"source": "near-miss", "near_miss": SMALL}
    rs = obtain("nm", spec)
    ref, _ = generate_near_miss(**SMALL)
    assert rs.name == "nm" and rs.corpus == ref.corpus and rs.twins == ref.twins


# ---------------------------------------------------------------- canonical twins.tsv
def _tiny(twins=None):
    corpus = Corpus(("d1", "d1~negation", "d2"), ("", "", ""), ("Alice trusts Bob.", "Alice does not trust Bob.", "x"))
    queries = Queries(("q1", "q2"), ("Alice has faith in Bob", "x"))
    qrels = Qrels({"q1": {"d1": 1}, "q2": {"d2": 1}})
    return RetrievalSet(
        "tiny",
        corpus,
        queries,
        qrels,
        Split(("q1",), ("q2",)),
        twins={"d1": (("d1~negation", "negation"),)} if twins is None else twins,
    )


def test_canonical_roundtrip_keeps_twins(tmp_path):
    rs, _ = generate_near_miss(**SMALL)
    write_canonical(rs, tmp_path)
    back = load_canonical(tmp_path, "near-miss")
    assert back.twins == rs.twins and back.corpus == rs.corpus
    lines = (tmp_path / "twins.tsv").read_text().splitlines()
    assert lines[0] == "corpus-id\ttwin-id\ttype" and len(lines) == 1 + 117


def test_canonical_without_twins_file(tmp_path):
    write_canonical(_tiny(), tmp_path)
    (tmp_path / "twins.tsv").unlink()
    assert load_canonical(tmp_path).twins == {}


@pytest.mark.parametrize(
    "body,line,field,words",
    [
        ("d1\tnope\tnegation\n", 3, "twin-id", "unknown document id"),
        ("nope\td1~negation\tnegation\n", 3, "corpus-id", "unknown document id"),
        ("d1\td1~negation\tparaphrase\n", 3, "type", "expected one of"),
        ("d1\td1~negation\n", 3, None, "3 tab-separated columns"),
        ("d1\td1~negation\tnegation\textra\n", 3, None, "3 tab-separated columns"),
    ],
)
def test_bad_twins_file(tmp_path, body, line, field, words):
    write_canonical(_tiny(), tmp_path)
    p = tmp_path / "twins.tsv"
    p.write_text("corpus-id\ttwin-id\ttype\nd1\td1~negation\tnegation\n" + body)
    with pytest.raises(DataFormatError) as e:
        load_canonical(tmp_path)
    assert (e.value.line, e.value.field) == (line, field)
    assert e.value.path.endswith("twins.tsv") and f"twins.tsv:{line}" in str(e.value) and words in str(e.value)
    with pytest.raises(DataFormatError):
        load_twins(p, _tiny().corpus)


def test_twin_that_is_gold_is_rejected():
    corpus = Corpus(("d1", "d2"), ("", ""), ("Alice trusts Bob.", "Alice does not trust Bob."))
    qrels = Qrels({"q1": {"d1": 1, "d2": 1}})
    with pytest.raises(ValueError, match="both 'd1' and its negation twin 'd2' as gold"):
        RetrievalSet(
            "t", corpus, Queries(("q1",), ("a",)), qrels, Split(("q1",), ()), twins={"d1": (("d2", "negation"),)}
        )
    with pytest.raises(ValueError, match="unknown document"):
        _tiny(twins={"d1": (("zz", "negation"),)})


# ---------------------------------------------------------------- the near_miss hook
CORPUS = {
    "d1": "Alice trusts Bob.",  # gold q1: negation added; role swap = d5's text: skipped
    "d2": "Carl is left of Dana.",  # gold q2: both added
    "d3": "the cat chases the mouse.",  # gold q3: neither applies
    "d4": "Eve does not trust Frank.",  # gold q4: already negated; role swap added
    "d5": "Bob trusts Alice.",  # not gold: no twins
    "d6": "Gina helps Hank.",  # not gold: no twins
    "d7": "Ivy trusts Ivy.",  # gold q5: negation added; same argument both sides
    "d8": "Jack helps Kim. Kim helps Jack.",  # gold q6: not one sentence
}


def _beir(folder, corpus=CORPUS):
    write_jsonl(
        folder / "corpus.jsonl",
        [json.dumps({"_id": d, "title": "T" if d == "d2" else "", "text": t}) for d, t in corpus.items()],
    )
    write_jsonl(folder / "queries.jsonl", [json.dumps({"_id": f"q{i}", "text": f"query {i}"}) for i in range(1, 7)])
    (folder / "qrels").mkdir(exist_ok=True)
    gold = {"q1": "d1", "q2": "d2", "q3": "d3", "q4": "d4", "q5": "d7", "q6": "d8"}

    def rows(qs):
        return "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{gold[q]}\t1\n" for q in qs)

    (folder / "qrels" / "train.tsv").write_text(rows(["q1", "q2", "q3"]))
    (folder / "qrels" / "test.tsv").write_text(rows(["q4", "q5", "q6"]))
    return folder


def test_hook_adds_twins_of_gold_documents(tmp_path):
    folder = _beir(tmp_path / "ds")
    rs = obtain("x", {"source": "local", "path": str(folder), "near_miss": {"types": ["negation", "role_swap"]}})
    text = dict(zip(rs.corpus.ids, rs.corpus.texts))
    title = dict(zip(rs.corpus.ids, rs.corpus.titles))
    assert rs.twins == {
        "d1": (("d1~negation", "negation"),),
        "d2": (("d2~negation", "negation"), ("d2~role_swap", "role_swap")),
        "d4": (("d4~role_swap", "role_swap"),),
        "d7": (("d7~negation", "negation"),),
    }
    assert len(rs.corpus) == 8 + 5 and list(rs.corpus.ids[:8]) == list(CORPUS)
    assert text["d1~negation"] == "Alice does not trust Bob."
    assert text["d2~negation"] == "Carl is not left of Dana." and text["d2~role_swap"] == "Dana is left of Carl."
    assert title["d2~negation"] == title["d2~role_swap"] == "T"
    assert text["d4~role_swap"] == "Frank does not trust Eve."
    assert text["d7~negation"] == "Ivy does not trust Ivy."
    assert rs.source["near_miss"] == {
        "types": ["negation", "role_swap"],
        "added": {"negation": 3, "role_swap": 2},
        "skipped": {
            "negation": {NO_VERB: 1, "already negated": 1, "not one sentence": 1},
            "role_swap": {
                "same text as a document": 1,
                NOT_NAMES: 1,
                "both arguments are the same": 1,
                "not one sentence": 1,
            },
        },
    }
    for q in rs.queries.ids:  # twins are never gold; gold sets unchanged
        assert not any("~" in d for d in rs.qrels.gold(q))
    assert rs.split.train == ("q1", "q2", "q3") and rs.split.heldout == ("q4", "q5", "q6")


def test_hook_twin_id_collision(tmp_path):
    folder = _beir(tmp_path / "ds", {**CORPUS, "d2~role_swap": "Something else."})
    with pytest.raises(ValueError, match="d2~role_swap"):
        obtain("x", {"source": "local", "path": str(folder), "near_miss": {"types": ["negation", "role_swap"]}})


def test_hook_twin_duplicating_a_document_up_to_whitespace_is_skipped(tmp_path):
    """A twin is compared with the corpus as an encoder sees it (title + text, NFC, whitespace
    collapsed): d5 "Bob trusts Alice. " (trailing space) and d6 "Frank  pays Eve." (two
    spaces) block the role swaps of d1 and d3, which would otherwise be their exact
    duplicates, tied with them by every method. d2's twin keeps d2's title "T", so it is
    "T Dana helps Carl." and d9 "Dana helps Carl." does not block it."""
    corpus = {
        "d1": "Alice trusts Bob.",
        "d2": "Carl helps Dana.",
        "d3": "Eve pays Frank.",
        "d4": "Gina helps Hank.",
        "d5": "Bob trusts Alice. ",
        "d6": "Frank  pays Eve.",
        "d7": "Ivy helps Jack.",
        "d8": "Kim helps Lee.",
        "d9": "Dana helps Carl.",
    }
    folder = _beir(tmp_path / "ds", corpus)
    rs = obtain("x", {"source": "local", "path": str(folder), "near_miss": {"types": ["role_swap"]}})
    # gold: q1 d1, q2 d2 (title "T"), q3 d3, q4 d4, q5 d7, q6 d8 (see _beir)
    assert sorted(rs.twins) == ["d2", "d4", "d7", "d8"]
    assert rs.source["near_miss"]["skipped"] == {"role_swap": {"same text as a document": 2}}


def test_types_are_a_set(tmp_path):
    """The order of near_miss.types changes nothing: twins are made in TYPES order."""
    folder = _beir(tmp_path / "ds")
    a = obtain("x", {"source": "local", "path": str(folder), "near_miss": {"types": ["negation", "role_swap"]}})
    b = obtain("x", {"source": "local", "path": str(folder), "near_miss": {"types": ["role_swap", "negation"]}})
    assert a.corpus == b.corpus and a.twins == b.twins and a.source["near_miss"] == b.source["near_miss"]


def test_add_twins_unknown_type():
    with pytest.raises(ValueError, match="unknown type"):
        add_twins(_tiny(twins={}), ["paraphrase"])


# ---------------------------------------------------------------- BM25 ties on role swaps
def test_bm25_ties_role_swaps():
    rs, _ = generate_near_miss(**SMALL)
    rows, _ = bm25.evaluate(rs, {}, [1, 10], 10)
    got = {(r["split"], r["metric"]): r["value"] for r in rows}
    for split, n in (("train", 30), ("heldout", 20), ("all", 50)):
        assert got[split, "twin_pairs:role_swap"] == n
        assert got[split, "twin_tie:role_swap"] == 1.0 and got[split, "twin_win:role_swap"] == 0.0
        assert got[split, "twin_gap:role_swap"] == 0.0
    # same bag of words, same length: bit-identical scores for every query
    S = bm25.BM25(rs.corpus.passages()).scores(list(rs.queries.texts))
    row = {d: i for i, d in enumerate(rs.corpus.ids)}
    for d, pairs in rs.twins.items():
        for t, k in pairs:
            if k == "role_swap":
                assert np.array_equal(S[:, row[d]], S[:, row[t]])


# ---------------------------------------------------------------- the probe's twin margin
def test_probe_twin_margin_by_hand():
    # gold g = (1, 0, 0) and its twin t = (1, 0.5, 0) differ by delta = 0.5 along y. The other
    # documents lie far along -x and at y >= 2 (z = +-1 symmetric). Hard margin: min |w|^2 s.t.
    # w.(g - d) >= 1 for every non-gold d. The twin alone asks -0.5 w_y >= 1, whose min-norm
    # solution is w = (0, -2, 0); it gives every other d the score -2 y_d <= -4 <= g's 0 - 1, so
    # no other constraint binds and w is the optimum. (The default C = 1000 exceeds the 1-slack
    # dual weight it needs, alpha = |P| / |g - t|^2 = 5 * 4 = 20, so the soft margin is the same.)
    # Unit witness w/|w| = (0, -1, 0): twin margin = w/|w|.(g - t) = |g - t| = delta = 0.5.
    D = np.array([[1, 0, 0], [1, 0.5, 0], [-10, 2, 0], [-10, 3, 1], [-10, 3, -1], [-12, 2.5, 0]], dtype=np.float32)
    ids = ("g", "t", "o1", "o2", "o3", "o4")
    corpus = Corpus(ids, ("",) * 6, tuple(f"doc {i}" for i in ids))
    rs = RetrievalSet(
        "toy",
        corpus,
        Queries(("q1",), ("query",)),
        Qrels({"q1": {"g": 1}}),
        Split(("q1",), ()),
        twins={"g": (("t", "negation"),)},
    )
    index = SimpleNamespace(embeddings=D, doc_ids=list(ids))
    rows, records, _ = probe_mod.evaluate(rs, index, probe_mod.ProbeConfig(), "toy-enc", [1, 2], 2)
    got = {(r["split"], r["metric"]): r["value"] for r in rows}
    for split in ("train", "all"):
        assert got[split, "certified"] == 1.0
        assert got[split, "twin_pairs:negation"] == 1 and got[split, "twin_win:negation"] == 1.0
        assert got[split, "twin_tie:negation"] == 0.0
        for m in ("twin_gap", "twin_gap_p25", "twin_gap_p75"):
            assert got[split, f"{m}:negation"] == pytest.approx(0.5, rel=1e-2)
    assert ("heldout", "twin_win:negation") not in got  # no held-out query
    assert records[0]["certified"] and records[0]["twin_margin"]["t"] == pytest.approx(0.5, rel=1e-2)
    # the same margin straight from probe() + twin_margins
    res = probe_mod.probe(D, [[0]], solve="optimum")
    assert res[0].certified
    w = res[0].w / np.linalg.norm(res[0].w)
    assert w @ (D[0] - D[1]).astype(np.float64) == pytest.approx(0.5, rel=1e-2)
    recs = [{}]
    tm = probe_mod.twin_margins(rs, index, res, ["q1"], recs, {"all": ["q1"]}, {"method": "probe"})
    assert {r["metric"]: r["value"] for r in tm}["twin_gap:negation"] == pytest.approx(0.5, rel=1e-2)
    assert recs[0]["twin_margin"]["t"] == pytest.approx(0.5, rel=1e-2)


# ---------------------------------------------------------------- evaluate_scores twin rows
def _scored_set():
    ids = ("d1", "d1~negation", "d1~role_swap", "d2", "d2~negation", "d3", "d3~negation")
    corpus = Corpus(ids, ("",) * 7, tuple(f"text {i}" for i in range(7)))
    qrels = Qrels({"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}})
    twins = {
        "d1": (("d1~negation", "negation"), ("d1~role_swap", "role_swap")),
        "d2": (("d2~negation", "negation"),),
        "d3": (("d3~negation", "negation"),),
    }
    return RetrievalSet(
        "s", corpus, Queries(("q1", "q2", "q3"), ("a", "b", "c")), qrels, Split(("q1", "q2"), ("q3",)), twins=twins
    )


# rows: q1, q2, q3; columns as _scored_set's ids. Gold - twin (negation): q1 3 - 1 = 2 (win),
# q2 2 - 2 = 0 (tie), q3 1 - 4 = -3 (loss). Role swap (q1 only): 3 - 3 = 0 (tie).
SCORES = np.array([[3, 1, 3, 0, 0, 0, 0], [0, 0, 0, 2, 2, 0, 0], [0, 0, 0, 0, 0, 1, 4]], dtype=np.float32)


def _twin_values(rows):
    return {(r["split"], r["metric"]): r["value"] for r in rows if r["metric"].startswith("twin_")}


def test_evaluate_scores_twin_rows_by_hand():
    rs = _scored_set()
    rows, _ = evaluate_scores(rs, lambda a, b: SCORES[a:b], rs.corpus.ids, (), [1, 2], 2, "enc", "m", "tag", block=2)
    got = _twin_values(rows)
    # numpy's linear percentiles: train gaps [0, 2] -> p25 0.5, median 1, p75 1.5;
    # all gaps [-3, 0, 2] -> p25 -1.5, median 0, p75 1; held out [-3].
    expected = {
        ("train", "twin_pairs:negation"): 2,
        ("train", "twin_win:negation"): 0.5,
        ("train", "twin_tie:negation"): 0.5,
        ("train", "twin_gap:negation"): 1.0,
        ("train", "twin_gap_p25:negation"): 0.5,
        ("train", "twin_gap_p75:negation"): 1.5,
        ("train", "twin_pairs:role_swap"): 1,
        ("train", "twin_win:role_swap"): 0.0,
        ("train", "twin_tie:role_swap"): 1.0,
        ("train", "twin_gap:role_swap"): 0.0,
        ("train", "twin_gap_p25:role_swap"): 0.0,
        ("train", "twin_gap_p75:role_swap"): 0.0,
        ("heldout", "twin_pairs:negation"): 1,
        ("heldout", "twin_win:negation"): 0.0,
        ("heldout", "twin_tie:negation"): 0.0,
        ("heldout", "twin_gap:negation"): -3.0,
        ("heldout", "twin_gap_p25:negation"): -3.0,
        ("heldout", "twin_gap_p75:negation"): -3.0,
        ("all", "twin_pairs:negation"): 3,
        ("all", "twin_win:negation"): 1 / 3,
        ("all", "twin_tie:negation"): 1 / 3,
        ("all", "twin_gap:negation"): 0.0,
        ("all", "twin_gap_p25:negation"): -1.5,
        ("all", "twin_gap_p75:negation"): 1.0,
        ("all", "twin_pairs:role_swap"): 1,
        ("all", "twin_win:role_swap"): 0.0,
        ("all", "twin_tie:role_swap"): 1.0,
        ("all", "twin_gap:role_swap"): 0.0,
        ("all", "twin_gap_p25:role_swap"): 0.0,
        ("all", "twin_gap_p75:role_swap"): 0.0,
    }
    assert got.keys() == expected.keys()
    for key, v in expected.items():
        assert got[key] == pytest.approx(v, abs=1e-12), key
    assert all(
        r["k"] == "" and r["method"] == "m" and r["encoder"] == "enc" for r in rows if r["metric"].startswith("twin_")
    )
    # the twin rows follow each split's own rows
    splits = [r["split"] for r in rows]
    assert splits == sorted(splits, key=["train", "heldout", "all"].index)


def test_evaluate_scores_twin_not_retrieved():
    # q3's twin is not retrieved: it scores -inf, so q3 becomes a win and its infinite gap
    # leaves the quantiles (held out has no finite gap: empty values)
    rs = _scored_set()
    R = np.ones_like(SCORES, dtype=bool)
    R[2, 6] = False
    rows, _ = evaluate_scores(rs, lambda a, b: (SCORES[a:b], R[a:b]), rs.corpus.ids, (), [1], 1, "", "m", "tag")
    got = _twin_values(rows)
    assert got["heldout", "twin_win:negation"] == 1.0 and got["heldout", "twin_gap:negation"] == ""
    assert got["all", "twin_win:negation"] == pytest.approx(2 / 3) and got["all", "twin_gap:negation"] == 1.0
    assert got["all", "twin_gap_p25:negation"] == 0.5 and got["all", "twin_gap_p75:negation"] == 1.5
