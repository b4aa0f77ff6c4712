"""scripts/classification_data.py on tiny inputs made here (a fake sdist with a nested tarball, a
.cor file, an ovos-like summaries file): counts add up, the split is stable, bad input is counted
or refused. Nothing is downloaded."""
from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("classification_data", ROOT / "scripts" / "classification_data.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


cd = _module()


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def fake_sdist(path: Path, tweet_lines: list[str]) -> Path:
    inner = _tar_bytes({cd.VADER_TWEETS: "\r\n".join(tweet_lines).encode("utf-8")})
    path.write_bytes(_tar_bytes({f"vaderSentiment-3.3.2/{cd.VADER_MEMBER}": inner, "vaderSentiment-3.3.2/setup.py": b""}))
    return path


def tweets(n: int) -> list[str]:
    """n tweets cycling through positive, negative and near-neutral ratings."""
    scores = [2.5, -1.75, 0.2, -0.5, 0.5]
    return [f"{i + 1}\t{scores[i % len(scores)]}\ttweet number {i} &amp; more" for i in range(n)]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_vader_tweets_binarised_counts_add_up_and_split_is_stable(tmp_path):
    lines = tweets(200) + ["201\t3.1\ttweet number 0 &amp; more"]  # the same text again, same label
    src = fake_sdist(tmp_path / "v.tar.gz", lines)
    m = cd.build("vader_tweets", tmp_path / "out", tmp_path, paths={"vader_tweets": src})
    c = m["counts"]
    assert c["in"] == 201
    assert c["dropped"] == {"near_neutral": 40, "duplicate": 1}  # the 0.2s; -0.5 and 0.5 are kept
    assert c["kept"] == 160 and c["train"] + c["test"] == 160
    assert c["in"] == c["kept"] + sum(c["dropped"].values())
    folder = tmp_path / "out" / "vader_tweets"
    train, test = read_jsonl(folder / "train.jsonl"), read_jsonl(folder / "test.jsonl")
    assert len(train) == c["train"] and len(test) == c["test"] and 10 < len(test) < 60
    assert {r["label"] for r in train} == {"pos", "neg"}
    assert sum(r["label"] == "pos" for r in train + test) == 80  # 2.5 and 0.5
    assert all("&amp;" not in r["text"] and "&" in r["text"] for r in train)
    assert not {r["text"] for r in train} & {r["text"] for r in test}
    assert all(cd.split_of(r["text"]) == "test" for r in test)
    assert json.loads((folder / "manifest.json").read_text())["classes"]["pos"]["test"] == \
        sum(r["label"] == "pos" for r in test)
    # rebuilt elsewhere: the same files, byte for byte
    cd.build("vader_tweets", tmp_path / "again", tmp_path, paths={"vader_tweets": src})
    for split in ("train", "test"):
        assert (folder / f"{split}.jsonl").read_bytes() == (tmp_path / "again" / "vader_tweets" / f"{split}.jsonl").read_bytes()


def test_split_is_a_fixed_function_of_the_text():
    share = sum(cd.split_of(f"text {i}") == "test" for i in range(5000)) / 5000
    assert abs(share - cd.TEST_PERCENT / 100) < 0.02
    # pinned: a change of the hash or the cut-off moves items between train and test
    assert [cd.split_of(f"text {i}") for i in range(6)] == [_expected(f"text {i}") for i in range(6)]


def _expected(text: str) -> str:
    import hashlib
    return "test" if int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) % 100 < 20 else "train"


def test_malformed_tweet_lines_are_counted_and_too_many_refused(tmp_path):
    lines = tweets(300)
    lines[10] = "11\tnot-a-number\ttext"
    lines[20] = "21\t1.5"  # no text
    src = fake_sdist(tmp_path / "v.tar.gz", lines)
    m = cd.build("vader_tweets", tmp_path / "out", tmp_path, paths={"vader_tweets": src})
    assert m["counts"]["dropped"]["malformed"] == 2 and m["malformed_lines"] == [11, 21]
    assert m["counts"]["in"] == m["counts"]["kept"] + sum(m["counts"]["dropped"].values())
    bad = fake_sdist(tmp_path / "bad.tar.gz", ["1,2.0,comma separated"] * 50)
    with pytest.raises(cd.SourceError, match="50 of 50 lines malformed"):
        cd.build("vader_tweets", tmp_path / "out2", tmp_path, paths={"vader_tweets": bad})


def test_missing_or_wrong_source_files_are_errors(tmp_path):
    with pytest.raises(cd.SourceError, match="does not exist"):
        cd.build("vader_tweets", tmp_path / "out", tmp_path, paths={"vader_tweets": tmp_path / "absent.tar.gz"})
    (tmp_path / "empty.tar.gz").write_bytes(_tar_bytes({"x/setup.py": b""}))
    with pytest.raises(cd.SourceError, match="no additional_resources"):
        cd.build("vader_tweets", tmp_path / "out", tmp_path, paths={"vader_tweets": tmp_path / "empty.tar.gz"})
    with pytest.raises(cd.SourceError, match="does not exist"):
        cd.build("pang_lee", tmp_path / "out", tmp_path, paths={"pang_lee": tmp_path / "absent.cor"})
    assert not (tmp_path / "out").exists()


def test_pang_lee_reads_cp1252_labels_and_counts_malformed(tmp_path):
    lines = [f"__label__{'pos' if i % 2 else 'neg'} sentence {i} clich\xe9 ." for i in range(120)]
    lines.append("no label here")
    (tmp_path / "p.cor").write_bytes("\n".join(lines).encode("cp1252"))
    m = cd.build("pang_lee", tmp_path / "out", tmp_path, paths={"pang_lee": tmp_path / "p.cor"})
    assert m["counts"]["in"] == 121 and m["counts"]["kept"] == 120 and m["counts"]["dropped"] == {"malformed": 1}
    records = read_jsonl(tmp_path / "out" / "pang_lee" / "train.jsonl")
    assert {r["label"] for r in records} == {"pos", "neg"} and "cliché" in records[0]["text"]


def test_ovos_topics_drop_rules_conflicts_and_overlap(tmp_path):
    articles = {}
    for i in range(60):
        articles[f"A{i}"] = {"title": f"A{i}", "extract": f"A{i} is a small town of the region {i}.",
                             "description": f"Town number {i}", "topic": "Geography"}
        articles[f"B{i}"] = {"title": f"B{i}", "extract": "B is a painter.",
                             "description": f"painter of school {i}", "topic": "People"}
    articles["U"] = {"title": "U", "extract": "", "description": "Something", "topic": "Uncategorized"}
    articles["E"] = {"title": "E", "extract": "", "description": "", "topic": "Arts"}
    articles["C1"] = {"title": "C1", "extract": "", "description": "Shared words", "topic": "Arts"}
    articles["C2"] = {"title": "C2", "extract": "", "description": "Shared words", "topic": "History"}
    articles["D"] = {"title": "D", "extract": "", "description": "Town number 3", "topic": "Geography"}
    articles["M"] = ["not", "an", "object"]
    (tmp_path / "s.json").write_text(json.dumps(articles), encoding="utf-8")
    m = cd.build("ovos_topics", tmp_path / "out", tmp_path, paths={"ovos_topics": tmp_path / "s.json"})
    c = m["counts"]
    assert c["in"] == 126
    assert c["dropped"] == {"uncategorized": 1, "no_description": 1, "conflicting_labels": 2, "duplicate": 1,
                            "malformed": 1}
    assert c["kept"] == 120 and c["in"] == c["kept"] + sum(c["dropped"].values())
    test = read_jsonl(tmp_path / "out" / "ovos_topics" / "test.jsonl")
    # only a description found verbatim counts: "Town number 3" is not in "... a small town ...",
    # nor "painter of school 3" in "B is a painter."
    assert m["overlap"]["test_descriptions"] == len(test)
    assert m["overlap"]["test_descriptions_in_a_lead_section"] == 0
    articles["A0"]["extract"] = " ".join(f"Town number {i} lies here." for i in range(60))
    (tmp_path / "s.json").write_text(json.dumps(articles), encoding="utf-8")
    m = cd.build("ovos_topics", tmp_path / "out", tmp_path, paths={"ovos_topics": tmp_path / "s.json"})
    assert m["overlap"]["test_descriptions_in_a_lead_section"] == sum(r["label"] == "Geography" for r in test) > 0


def test_build_is_idempotent_and_force_rebuilds(tmp_path):
    src = fake_sdist(tmp_path / "v.tar.gz", tweets(100))
    out = tmp_path / "out"
    assert cd.build("vader_tweets", out, tmp_path, paths={"vader_tweets": src}) is not None
    assert cd.build("vader_tweets", out, tmp_path, paths={"vader_tweets": src}) is None
    (out / "vader_tweets" / "test.jsonl").unlink()  # an incomplete set is rebuilt
    assert cd.build("vader_tweets", out, tmp_path, paths={"vader_tweets": src}) is not None
    assert cd.build("vader_tweets", out, tmp_path, force=True, paths={"vader_tweets": src}) is not None
    fake_sdist(src, tweets(101))  # another source file: rebuilt
    assert cd.build("vader_tweets", out, tmp_path, paths={"vader_tweets": src})["counts"]["in"] == 101


def test_built_sets_are_read_by_the_probe(tmp_path):
    from pearl_model.evaluation.classification import read_split

    src = fake_sdist(tmp_path / "v.tar.gz", tweets(100))
    cd.build("vader_tweets", tmp_path / "out", tmp_path, paths={"vader_tweets": src})
    texts, labels = read_split(tmp_path / "out" / "vader_tweets" / "train.jsonl")
    assert len(texts) == len(labels) > 0 and set(labels) <= {"pos", "neg"}


def test_vader_download_refuses_a_file_of_another_hash(tmp_path):
    (tmp_path / "vaderSentiment-3.3.2.tar.gz").write_bytes(b"not the sdist")
    with pytest.raises(cd.SourceError, match="sha256 is not the pinned"):
        cd.vader_sdist(tmp_path)
