"""Phrase mining: constituents of five lexical types, OntoNotes entity types, the 95 labels.

Backends are chosen by name (`make_parser`, `make_ner`); each is imported only when used,
so the library works without the optional parsers installed.
"""
