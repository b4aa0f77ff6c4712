"""Phrase mining: constituents of five lexical types, OntoNotes entity types, the 95 labels.

Backends are chosen by name (`make_parser`, `make_ner`); each one's library (spaCy, transformers,
benepar and nltk) is imported only when it is used, so the library works without the optional
parsers installed.
"""
