"""WordNet synonym retrieval, the dev signal of name variants: which pairs it holds and how it is scored."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from pearl_model.evaluation import synonym_retrieval as SR  # noqa: E402
from pearl_model.pairs.synonyms import wordnet_dir  # noqa: E402


class _Lemma:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


class _Synset:
    def __init__(self, *names, lexname="noun.Tops"):
        self.names, self._lexname = names, lexname

    def lemmas(self):
        return [_Lemma(n) for n in self.names]

    def lexname(self):
        return self._lexname


class _WordNet:
    def __init__(self, synsets):
        self.synsets = synsets

    def all_synsets(self, pos):
        assert pos == "n"
        return iter(self.synsets)


TOY = _WordNet([_Synset("heart_attack", "myocardial_infarction", "coronary", lexname="noun.state"),
                _Synset("dog", lexname="noun.animal"),
                _Synset("aspirin", "acetylsalicylic_acid", lexname="noun.artifact"),
                _Synset("Salvia_azurea", "blue_sage", lexname="noun.plant"),
                _Synset("cat", "true_cat", lexname="noun.animal"), _Synset("true_cat", "felid", lexname="noun.animal")])


def test_pairs_map_another_name_to_the_first_and_leave_out_synsets_the_training_set_holds():
    pairs = SR.wordnet_name_pairs(exclude={"Cat"}, wordnet=TOY)
    by_gold = {gold: query for query, gold in pairs}
    assert set(by_gold) == {"heart attack", "aspirin", "Salvia azurea", "true cat"}  # one-name and "cat"'s out
    assert by_gold["heart attack"] in {"myocardial infarction", "coronary"}
    assert by_gold["aspirin"] == "acetylsalicylic acid" and by_gold["Salvia azurea"] == "blue sage"
    assert pairs == SR.wordnet_name_pairs(exclude={"cat"}, wordnet=TOY)  # the same draw every time
    assert {g for _, g in SR.wordnet_name_pairs(exclude={"felid"}, wordnet=TOY)} == \
        {"heart attack", "aspirin", "Salvia azurea", "cat"}  # any of a synset's names excludes it


def test_a_query_spelt_like_another_candidate_is_left_out_and_gold_indexes_its_title(caplog):
    with caplog.at_level("INFO", logger=SR.__name__):
        task = SR.synonym_task([("true cat", "felid"), ("Cat", "true cat"), ("blue sage", "Salvia azurea")])
    assert "3 of 10000 pairs drawn (3 on offer), 1 left out as spelt like another candidate, 2 queries among " \
           "3 first names" in caplog.text
    assert task.titles == ("felid", "true cat", "Salvia azurea")
    # "true cat" is itself a candidate name (of another synset): a tie at cosine 1 it cannot win
    assert list(zip(task.aliases, task.gold)) == [("Cat", 1), ("blue sage", 2)]
    assert SR.synonym_task([("a", "b")], max_pairs=1).aliases == ("a",)
    assert SR.synonym_task([("b", "a"), ("A", "b")]) is None  # each query is the other's title


def test_dev_scores_add_the_synonym_top1_and_selection_compares_it():
    from pearl_model.training import selection as S

    task = SR.synonym_task([("heart attack", "myocardial infarction"), ("aspirin", "acetylsalicylic acid")])
    right = {"heart attack": [1, 0, 0], "myocardial infarction": [1, 0.1, 0], "aspirin": [0, 1, 0],
             "acetylsalicylic acid": [0, 1, 0.1]}

    class Lookup:
        def __init__(self, table):
            self.table = table

        def encode(self, phrases, **_):
            v = np.array([self.table[p] for p in phrases], dtype=np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    good = S.dev_scores(Lookup(right), None, datasets=(), synonyms=task)
    swapped = S.dev_scores(Lookup(right | {"aspirin": [1, 0, 0]}), None, datasets=(), synonyms=task)
    assert good["wordnet_synonym_top1"] == 100 and swapped["wordnet_synonym_top1"] == 50
    assert "wordnet_synonym_top1" in S.criteria(good) and "wordnet_synonym_mrr" not in S.criteria(good)
    assert S.selection_score(swapped, good) == (-50, -50)


def test_seen_names_are_what_training_teaches_but_context_sentences():
    from pearl_model.training.selection import seen_names
    from pearl_model.training.loop import Example

    ex = Example("heart attack", 0, cached={"wordnet": ("heart onslaught",), "context": ("He had a heart attack .",)},
                 negatives=("heart disease",))
    assert seen_names([ex]) == {"heart attack", "heart onslaught", "heart disease"}


@pytest.mark.skipif(not (Path(wordnet_dir()) / "data.noun").is_file(), reason="WordNet 3.0 not installed")
def test_the_real_task_is_fixed_by_its_seed_and_excludes_what_it_is_told():
    task = SR.wordnet_synonym_task(300)
    again = SR.wordnet_synonym_task(300)
    assert task == again and 290 <= len(task.aliases) <= 300
    gone = task.titles[task.gold[0]]
    without = SR.wordnet_synonym_task(300, exclude={gone.upper()})
    assert gone not in without.titles and task.aliases[0] not in without.aliases
    assert SR.wordnet_synonym_task(300, seed=1) != task


def test_groups_keep_the_queries_whose_first_name_heads_a_synset_of_the_group_among_every_candidate():
    task = SR.synonym_task(SR.wordnet_name_pairs(wordnet=TOY))
    groups = SR.group_tasks(task, SR.lexname_of(TOY))
    assert set(groups) == set(SR.GROUPS)
    named = {g: {t.titles[i] for i in t.gold} for g, t in groups.items()}
    assert named["states, body, substances"] == {"heart attack"}
    assert named["animals, plants"] == {"Salvia azurea", "true cat"}  # "true cat" -> "cat": spelt like a candidate
    assert named["people, places, groups"] == set()  # aspirin (noun.artifact) is in no group
    assert all(t.titles == task.titles for t in groups.values())  # ranked among every candidate, as the whole task
    for t in groups.values():
        assert all(t.titles[g] in {task.titles[h] for q, h in zip(task.aliases, task.gold) if q == a}
                   for a, g in zip(t.aliases, t.gold))  # each query keeps its own gold


@pytest.mark.skipif(not (Path(wordnet_dir()) / "data.noun").is_file(), reason="WordNet 3.0 not installed")
def test_the_selection_reads_the_whole_draw_and_each_group_of_names_as_its_own_criterion():
    from pearl_model.training import selection as S

    signals = S.synonym_signal(300, set())
    assert signals["wordnet_synonym"] == SR.wordnet_synonym_task(300)  # the whole draw as before
    groups = {k: t for k, t in signals.items() if k != "wordnet_synonym"}
    assert set(groups) == {"wordnet_animals_plants", "wordnet_states_body_substances", "wordnet_people_places_groups"}
    whole = signals["wordnet_synonym"]
    pairs = set(zip(whole.aliases, whole.gold))
    assert all(set(zip(t.aliases, t.gold)) <= pairs and t.titles == whole.titles for t in groups.values())
    assert S.synonym_signal(300, set(), seed=1)["wordnet_synonym"] != whole

    class Exact:  # a random direction per name: what is scored and named is under test here, not the score
        def encode(self, phrases, **_):
            v = np.stack([np.random.default_rng(abs(hash(p)) % 2**32).normal(size=64) for p in phrases])
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    scores = S.dev_scores(Exact(), None, datasets=(), synonyms=signals)
    assert {f"{k}_top1" for k in signals} <= set(S.criteria(scores))
    assert not any(k.endswith("_mrr") for k in S.criteria(scores))
