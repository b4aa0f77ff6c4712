"""TransformersNer on tiny BERT taggers built here (no downloads).

Two kinds of model: one with random weights for the plumbing (offsets, types, one list
per text), and one whose weights are set by hand so that each vocabulary word gets a
chosen tag: the residual branches of both layers are zeroed (attention output and FFN
output projections), so a token's final state is its word embedding after LayerNorm,
and each tag's embedding pattern is orthogonal to the others, so the classifier's argmax
is exactly the chosen tag. That gives known answers for the aggregation.
"""
from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForTokenClassification, PreTrainedTokenizerFast

from pearl_model.phrases.hf_ner import TransformersNer, strip_span
from pearl_model.phrases.labels import ONTONOTES_TYPES
from pearl_model.phrases.spans import ModelMissing, ParsedSentence

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# "Alice" is not a vocabulary word: WordPiece splits it into "Al" "##ice", so the
# aggregation must join word pieces.
WORDS = ["The", "New", "York", "Times", "hired", "Al", "##ice", "visited", "Paris", "and", "London",
         "in", "May", ",", ".", "Google", "bought", "a", "company"]
ONTO_LABELS = ["O", "B-PERSON", "I-PERSON", "B-ORG", "I-ORG", "B-GPE", "I-GPE", "B-DATE", "I-DATE"]
CONLL_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]

SENTENCES = [
    "The New York Times hired Alice .",
    "Alice visited Paris and London in May , 2019 .",  # "2019" is [UNK]
    "",
    "   ",
    "Google  bought a company   in London.",
    "Zebras and unknown words only",
]


def _save(tmp_path, name: str, labels: list[str], tags: dict[str, str] | None) -> str:
    """Save a tiny BERT tagger + fast WordPiece tokenizer; tags=None gives random weights."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64,
                        id2label=dict(enumerate(labels)), label2id={lab: i for i, lab in enumerate(labels)})
    torch.manual_seed(0)
    model = BertForTokenClassification(config)
    if tags is not None:
        with torch.no_grad():
            # Pattern of tag k: +1 at 2k, -1 at 2k+1; zero mean, so LayerNorm keeps its direction.
            pattern = torch.zeros(len(labels), config.hidden_size)
            for k in range(len(labels)):
                pattern[k, 2 * k], pattern[k, 2 * k + 1] = 1.0, -1.0
            emb = model.bert.embeddings
            emb.word_embeddings.weight.copy_(pattern[[labels.index(tags.get(t, "O")) for t in vocab]])
            emb.position_embeddings.weight.zero_()
            emb.token_type_embeddings.weight.zero_()
            for layer in model.bert.encoder.layer:
                for dense in (layer.attention.output.dense, layer.output.dense):
                    dense.weight.zero_()
                    dense.bias.zero_()
            model.classifier.weight.copy_(pattern)
            model.classifier.bias.zero_()
    path = tmp_path / name
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


ORG_PERSON = {"New": "B-ORG", "York": "I-ORG", "Times": "I-ORG", "Al": "B-PERSON", "##ice": "I-PERSON",
              "Paris": "B-GPE", "London": "B-GPE", "May": "B-DATE", "Google": "B-ORG"}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ner_models")
    return {
        "random": _save(tmp, "random", ONTO_LABELS, None),
        "crafted": _save(tmp, "crafted", ONTO_LABELS, ORG_PERSON),
        "conll": _save(tmp, "conll", CONLL_LABELS,
                       {"New": "B-LOC", "York": "I-LOC", "Times": "B-MISC", "Al": "B-PER", "##ice": "I-PER"}),
    }


def _spans(text, ents):
    return [(text[e.start:e.end], e.type) for e in ents]


def test_saved_model_uses_safetensors(models_dir):
    from pathlib import Path
    assert (Path(models_dir["crafted"]) / "model.safetensors").exists()


def test_random_model_plumbing(models_dir):
    ner = TransformersNer(models_dir["random"], batch_size=2)
    assert ner.name == "transformers"
    parsed = [ParsedSentence(text=t, constituents=[]) for t in SENTENCES]
    out = ner.entities(parsed)
    assert len(out) == len(SENTENCES)
    assert out[2] == [] and out[3] == []  # empty and blank texts
    n = 0
    for text, ents in zip(SENTENCES, out):
        for e in ents:
            n += 1
            assert 0 <= e.start < e.end <= len(text)
            piece = text[e.start:e.end]
            assert piece == piece.strip() and piece
            assert e.type in ONTONOTES_TYPES
    assert n > 0, "the random tagger found nothing, so the checks above were vacuous"


@pytest.mark.parametrize("aggregation", ["simple", "first", "average", "max"])
def test_known_answer(models_dir, aggregation):
    ner = TransformersNer(models_dir["crafted"], aggregation=aggregation)
    text = SENTENCES[0]
    [ents] = ner.entities([ParsedSentence(text=text, constituents=[])])
    assert _spans(text, ents) == [("New York Times", "ORG"), ("Alice", "PERSON")]


def test_known_answers_in_batches_keep_order(models_dir):
    ner = TransformersNer(models_dir["crafted"], batch_size=2)
    out = ner.entities_for_texts(SENTENCES)
    got = [_spans(t, ents) for t, ents in zip(SENTENCES, out)]
    assert got == [
        [("New York Times", "ORG"), ("Alice", "PERSON")],
        [("Alice", "PERSON"), ("Paris", "GPE"), ("London", "GPE"), ("May", "DATE")],
        [],
        [],
        [("Google", "ORG"), ("London", "GPE")],
        [],
    ]
    assert ner.entities_for_texts([]) == []


def test_max_chars_cuts_texts(models_dir):
    ner = TransformersNer(models_dir["crafted"], max_chars=len("The New York Times"))
    text = SENTENCES[0]
    [ents] = ner.entities_for_texts([text])
    assert _spans(text, ents) == [("New York Times", "ORG")]


def test_non_ontonotes_labels_need_label_map(models_dir):
    with pytest.raises(ValueError) as info:
        TransformersNer(models_dir["conll"])
    msg = str(info.value)
    # PER is an alias of PERSON and LOC is an OntoNotes type; only MISC is unknown.
    assert "MISC" in msg and "label_map" in msg and "PER," not in msg and "LOC" not in msg


def test_label_map_ignores_and_renames(models_dir):
    text = SENTENCES[0]
    ner = TransformersNer(models_dir["conll"], label_map={"MISC": None})
    assert _spans(text, ner.entities_for_texts([text])[0]) == [("New York", "LOC"), ("Alice", "PERSON")]
    ner = TransformersNer(models_dir["conll"], label_map={"misc": None, "LOC": "GPE"})
    assert _spans(text, ner.entities_for_texts([text])[0]) == [("New York", "GPE"), ("Alice", "PERSON")]
    with pytest.raises(ValueError, match="THING"):
        TransformersNer(models_dir["conll"], label_map={"MISC": "THING"})


def test_bad_arguments(models_dir):
    with pytest.raises(ValueError, match="aggregation"):
        TransformersNer(models_dir["crafted"], aggregation="none")


def test_missing_local_model(tmp_path):
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(ModelMissing) as info:
        TransformersNer(str(missing))
    assert str(missing) in str(info.value) and "local" in str(info.value)
    (tmp_path / "empty").mkdir()  # a directory without a model in it
    # "empty" contains "mpt": AutoConfig alone would guess an MPT config from the name.
    with pytest.raises(ModelMissing, match="no config.json"):
        TransformersNer(str(tmp_path / "empty"))


@pytest.mark.parametrize("remove, part", [(("model.safetensors",), "weights"),
                                          (("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
                                           "tokenizer")])
def test_incomplete_local_model(models_dir, tmp_path, remove, part):
    import shutil
    from pathlib import Path
    path = tmp_path / "partial"
    shutil.copytree(models_dir["crafted"], path)
    for name in remove:
        (path / name).unlink(missing_ok=True)
    with pytest.raises(ModelMissing, match=part) as info:
        TransformersNer(str(path))
    assert str(path) in str(info.value)
    assert Path(models_dir["crafted"]).exists()


def test_hub_name_without_hub_access(monkeypatch):
    # Offline mode makes transformers fail at once instead of retrying the network.
    monkeypatch.setattr("transformers.utils.hub._is_offline_mode", True)
    with pytest.raises(ModelMissing) as info:
        TransformersNer("no-such-owner/no-such-ner-model")
    assert "no-such-owner/no-such-ner-model" in str(info.value) and "hub access" in str(info.value)


def test_strip_span():
    assert strip_span(" New York ", 0, 9) == (1, 9)
    assert strip_span("a  b", 1, 3) is None
    assert strip_span("ab", 0, 2) == (0, 2)
