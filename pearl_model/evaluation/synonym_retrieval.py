"""WordNet synonym retrieval: dev data for name variants, which no benchmark dev split has.

YAGO-10k and UMLS-10k (test files only) retrieve an entity's canonical name from a variant of it
("J. Bosscha" -> "Johannes Bosscha", "Opegrapha macrocarpa" -> "Graphis macrocarpa"). Every model
trained so far lost there (UMLS -0.3 to -1.6) while every dev signal it was chosen on gained, so
nothing in the selection could see the loss. WordNet's noun synsets hold pairs of the same kind:
common and taxonomic names of animals and plants, disease and chemical names, people's and
places' other names. On such pairs the trained model lost to the backbone as it did on UMLS and
YAGO (docs/research/recipe-name-variants.md).

One pair per synset: a seeded draw of another name -> the synset's first name, retrieved among the
first names of all pairs chosen. A synset holding a name the training set has (``exclude``:
its phrases, positives, negatives) is left out, so the signal does not reward having seen a pair
in training; so is a pair whose query is spelt like another candidate (a tie it cannot win).
"""
from __future__ import annotations

import logging
import random
from functools import lru_cache
from typing import Iterable

from pearl_model.pairs.synonyms import wordnet_reader

from .alias_retrieval import AliasRetrieval

log = logging.getLogger(__name__)

DEFAULT_PAIRS = 10000

# WordNet lexicographer files by the kind of names they hold: UMLS-10k's clinical names are the
# second group, YAGO-10k's the third; a mean over all pairs can gain while one group loses.
GROUPS = {"animals, plants": ("noun.animal", "noun.plant"),
          "states, body, substances": ("noun.state", "noun.body", "noun.substance"),
          "people, places, groups": ("noun.person", "noun.location", "noun.group")}


@lru_cache(maxsize=4)
def noun_synsets(wordnet) -> tuple[tuple[tuple[str, ...], str], ...]:
    """Each noun synset's names (the first name first, underscores as spaces, repeats dropped) and its
    lexicographer file, in WordNet's file order (the same on every machine). Read once per reader:
    NLTK builds a Synset object per line, and one pass over the 82,000 noun synsets took 8 s of
    every dev selection, which needs the names and the files both."""
    return tuple((tuple(dict.fromkeys(lemma.name().replace("_", " ") for lemma in synset.lemmas())), synset.lexname())
                 for synset in wordnet.all_synsets("n"))


def wordnet_name_pairs(exclude: Iterable[str] = (), seed: int = 0, wordnet=None) -> list[tuple[str, str]]:
    """(other name, first name) of every noun synset with two or more names, none of them in
    ``exclude`` (compared casefolded), shuffled by ``seed``."""
    if wordnet is None:
        wordnet = wordnet_reader()
    seen = {s.casefold() for s in exclude}
    rng = random.Random(seed)
    pairs = []
    for names, _ in noun_synsets(wordnet):
        if len(names) < 2 or any(n.casefold() in seen for n in names):
            continue
        pairs.append((rng.choice(names[1:]), names[0]))
    rng.shuffle(pairs)
    return pairs


def synonym_task(pairs: list[tuple[str, str]], max_pairs: int = DEFAULT_PAIRS):
    """An AliasRetrieval of the first ``max_pairs`` pairs whose query is not another candidate's
    name; None when none is left."""
    chosen = pairs[:max_pairs]
    titles = list(dict.fromkeys(t for _, t in chosen))
    index = {t: i for i, t in enumerate(titles)}
    folded = {t.casefold(): i for i, t in enumerate(titles)}
    kept = [(q, index[t]) for q, t in chosen if folded.get(q.casefold(), index[t]) == index[t]]
    log.info("WordNet synonym retrieval: %d of %d pairs drawn (%d on offer), %d left out as spelt like another "
             "candidate, %d queries among %d first names", len(chosen), max_pairs, len(pairs),
             len(chosen) - len(kept), len(kept), len(titles))
    if not kept:
        return None
    return AliasRetrieval(tuple(q for q, _ in kept), tuple(titles), tuple(g for _, g in kept))


def wordnet_synonym_task(max_pairs: int = DEFAULT_PAIRS, exclude: Iterable[str] = (), seed: int = 0, wordnet=None):
    """The dev retrieval task: :func:`synonym_task` over :func:`wordnet_name_pairs`."""
    return synonym_task(wordnet_name_pairs(exclude, seed, wordnet), max_pairs)


def lexname_of(wordnet) -> dict[str, set[str]]:
    """first name -> the lexicographer files of the synsets it heads."""
    out: dict[str, set[str]] = {}
    for names, lexname in noun_synsets(wordnet):
        out.setdefault(names[0], set()).add(lexname)
    return out


def group_tasks(task, lexnames: dict[str, set[str]], groups: dict[str, tuple[str, ...]] = GROUPS) -> dict:
    """group -> the queries of ``task`` whose first name heads a synset of that group (among all
    of ``task``'s candidates, so a group's score is comparable with the whole task's)."""
    out = {}
    for group, files in groups.items():
        keep = [i for i, g in enumerate(task.gold) if lexnames.get(task.titles[g], set()) & set(files)]
        out[group] = AliasRetrieval(tuple(task.aliases[i] for i in keep), task.titles, tuple(task.gold[i] for i in keep))
    return out
