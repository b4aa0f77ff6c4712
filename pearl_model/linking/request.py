"""The rules of a link request, checked once for `pearl link` and the `link` flow, each in its own
words (option names or parameter names), and its default weights: no numpy here, so that the
command line shows the default in its help without loading the rescoring."""
from __future__ import annotations

# the rescoring's weights (.rescore), chosen by the study on the labelled halves of the 50 AutoFJ
# tasks (benchmarks/link_autofj.py): the convex combination with the best mean recall at precision 0.9 there
WEIGHTS = {"cosine": 0.9, "token_set_ratio": 0.1}
COSINE_WEIGHT = WEIGHTS["cosine"]  # `pearl link` and the link flow's default; 1: the cosine alone

CLI_NAMES = {"dedupe": "--dedupe", "threshold": "--threshold", "labels": "--labels", "table": "TABLE",
             "left": "LEFT", "right": "RIGHT", "one_table": "give one table, not two", "dedupe_on": "--dedupe"}
PARAMETER_NAMES = {"dedupe": "dedupe", "threshold": "threshold", "labels": "labels", "table": "table (left)",
                   "left": "left", "right": "right", "one_table": "give no right table", "dedupe_on": "dedupe=true"}


def request_error(dedupe: bool, right: bool, threshold: bool, labels: bool, names: dict[str, str]) -> str | None:
    """What is wrong with a request (``right``, ``threshold``, ``labels``: whether each is given), in
    ``names``' words; None when nothing is."""
    n = names
    if dedupe and right:
        return f"{n['dedupe']} matches one {n['table']} against itself: {n['one_table']}"
    if not dedupe and not right:
        return f"give {n['left']} and {n['right']}, or one {n['table']} with {n['dedupe_on']}"
    if threshold and labels:
        return f"give {n['threshold']} or {n['labels']} (a threshold chosen from them), not both"
    if dedupe and not threshold and not labels:
        return (f"{n['dedupe']} needs {n['threshold']} or {n['labels']}: without one every row joins its nearest "
                "neighbour's cluster")
    return None
