"""Write the quickstart's example tables: made-up company names, generated from the word lists below
with a fixed seed (no row of any benchmark set, no real register).

    python examples/companies/make_tables.py     # rewrites right.csv, left.csv and labels.csv here

right.csv: the register, one canonical name per row. left.csv: names as another system typed them,
a variant of a register name (typos, abbreviations, case, a dropped suffix) or a name the register
lacks. labels.csv (columns left, right): a random sample of half the left rows, each with its register
name, or an empty right cell where the register lacks it: labels hold names without a partner in
their true share, so that a match for such a name counts against the precision a threshold reaches.
"""
from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 56
REGISTER_ROWS, LEFT_ROWS, UNMATCHED = 300, 200, 20
LABELLED = LEFT_ROWS // 2  # left rows sampled for labels.csv

FIRST = """Amber Arctic Aspen Atlas Bay Beacon Birch Blue Bright Cedar Coral Crescent Crown Delta Eagle
Ember Falcon Fern Golden Granite Harbor Hazel Iron Juniper Lake Maple Meadow North Oak Orchid Pine
Quartz Raven River Silver Spruce Stone Summit Tidal Valley Willow""".split()
TRADE = """Analytics Bakery Biotech Builders Capital Chemicals Consulting Dairy Energy Engineering Foods
Freight Furniture Holdings Insurance Labs Logistics Media Metals Mining Motors Optics Paper Pharma
Plastics Robotics Shipping Software Solar Systems Textiles Tools Travel Water""".split()
SUFFIX = ["Limited", "Incorporated", "Company", "Corporation", "Group", "International", "& Sons", "Partners"]
SHORT = {"Limited": "Ltd", "Incorporated": "Inc", "Company": "Co", "Corporation": "Corp",
         "International": "Intl", "& Sons": "and Sons", "Partners": "Ptnrs", "Group": "Grp"}


def register(rng: random.Random) -> list[str]:
    names: set[str] = set()
    while len(names) < REGISTER_ROWS + UNMATCHED:
        names.add(f"{rng.choice(FIRST)} {rng.choice(TRADE)} {rng.choice(SUFFIX)}")
    return sorted(names)


def typo(word: str, rng: random.Random) -> str:
    """One keyboard slip: a letter dropped, doubled or two swapped."""
    if len(word) < 4:
        return word
    i = rng.randrange(1, len(word) - 1)
    return rng.choice([word[:i] + word[i + 1:], word[:i] + word[i] + word[i:],
                       word[:i] + word[i + 1] + word[i] + word[i + 2:]])


def variant(name: str, rng: random.Random) -> str:
    """The name as another system might hold it: one or two edits."""
    words = name.split(" ")
    for edit in rng.sample(["typo", "short", "case", "drop"], rng.choice([1, 2])):
        if edit == "typo":
            i = rng.randrange(2)
            words[i] = typo(words[i], rng)
        elif edit == "short":
            tail = " ".join(words[2:])
            words = words[:2] + SHORT.get(tail, tail).split(" ")
        elif edit == "case":
            words = [w.upper() if rng.random() < 0.5 else w.lower() for w in words]
        else:
            words = words[:2]
    return " ".join(words)


def generate(seed: int = SEED) -> tuple[list[str], list[tuple[str, str | None]], list[tuple[str, str | None]]]:
    """(the register, the left rows as (name, its register name or None), the labelled rows: a random
    sample of LABELLED left rows, in their order in left.csv)."""
    rng = random.Random(seed)
    names = register(rng)
    rng.shuffle(names)
    right, absent = sorted(names[:REGISTER_ROWS]), names[REGISTER_ROWS:]
    seen: set[str] = set()

    def fresh(name: str) -> str:  # a left name is written once: a label says what it is
        while (typed := variant(name, rng)) in seen:
            pass
        seen.add(typed)
        return typed

    left = [(fresh(n), n) for n in rng.sample(right, LEFT_ROWS - UNMATCHED)]
    left += [(fresh(n), None) for n in absent]  # names the register lacks
    rng.shuffle(left)
    labelled = [left[i] for i in sorted(rng.sample(range(len(left)), LABELLED))]  # drawn after the tables
    return right, left, labelled


def write(directory: Path, seed: int = SEED) -> None:
    """right.csv, left.csv and labels.csv of ``seed`` into ``directory``."""
    right, left, labelled = generate(seed)
    with open(directory / "right.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "name"])
        w.writerows((f"R{i:04d}", n) for i, n in enumerate(right))
    with open(directory / "left.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "name"])
        w.writerows((f"L{i:04d}", n) for i, (n, _) in enumerate(left))
    with open(directory / "labels.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["left", "right"])
        w.writerows((n, truth or "") for n, truth in labelled)  # an empty cell: the register lacks it


def main() -> None:
    write(HERE)


if __name__ == "__main__":
    main()
