"""The 95 phrase types: 5 lexical types x (18 OntoNotes entity types + OTHER).

The vocabulary is fixed (not learnt from data), so a label id means the same thing in
every corpus version and in every trained type head.
"""
from __future__ import annotations

LEXICAL_TYPES: tuple[str, ...] = ("NP", "VP", "PP", "ADVP", "ADJP")

# OntoNotes 5.0 named-entity types, as spaCy's and most OntoNotes taggers name them.
ONTONOTES_TYPES: tuple[str, ...] = (
    "CARDINAL", "DATE", "EVENT", "FAC", "GPE", "LANGUAGE", "LAW", "LOC", "MONEY", "NORP",
    "ORDINAL", "ORG", "PERCENT", "PERSON", "PRODUCT", "QUANTITY", "TIME", "WORK_OF_ART",
)
OTHER = "OTHER"
ENTITY_TYPES: tuple[str, ...] = ONTONOTES_TYPES + (OTHER,)

LABELS: tuple[str, ...] = tuple(f"{lex}-{ent}" for lex in LEXICAL_TYPES for ent in ENTITY_TYPES)
LABEL_IDS: dict[str, int] = {lab: i for i, lab in enumerate(LABELS)}

# The paper's lexical-type mix over its 3.8M phrases (Table 1), shown beside ours.
PAPER_LEXICAL_SHARE: dict[str, float] = {"NP": 60.1, "VP": 0.4, "PP": 26.1, "ADVP": 11.0, "ADJP": 2.4}

# Spellings other OntoNotes taggers use for the same types.
_ALIASES = {"WORK OF ART": "WORK_OF_ART", "WORKOFART": "WORK_OF_ART", "PER": "PERSON", "FACILITY": "FAC",
            "ORGANIZATION": "ORG", "LOCATION": "LOC"}


def label(lexical_type: str, entity_type: str) -> str:
    lab = f"{lexical_type}-{entity_type}"
    if lab not in LABEL_IDS:
        raise ValueError(f"unknown phrase label {lab!r}: lexical type must be one of {LEXICAL_TYPES}, "
                         f"entity type one of {ENTITY_TYPES}")
    return lab


def label_id(lab: str) -> int:
    try:
        return LABEL_IDS[lab]
    except KeyError:
        raise ValueError(f"unknown phrase label {lab!r} (the vocabulary has {len(LABELS)} labels)") from None


def ontonotes_type(raw: str) -> str | None:
    """An NER tag as one of the 18 OntoNotes types: BIO/BILOU prefixes stripped, aliases mapped.

    Returns None for "O" and for tags that are not OntoNotes types (e.g. CoNLL's MISC).
    """
    tag = raw.strip().upper()
    if len(tag) > 2 and tag[1] in "-_" and tag[0] in "BIELSU":
        tag = tag[2:]
    tag = _ALIASES.get(tag, tag)
    return tag if tag in ONTONOTES_TYPES else None


def vocabulary() -> list[dict]:
    """The label vocabulary as rows, stored beside every `phrases` dataset."""
    return [{"label_id": i, "label": lab, "lexical_type": lab.split("-", 1)[0], "entity_type": lab.split("-", 1)[1]}
            for i, lab in enumerate(LABELS)]
