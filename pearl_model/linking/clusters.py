"""Duplicates as clusters: the connected components of the pairs kept (a~b and b~c put a, b and c
in one cluster, whether or not a~c was kept)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def cluster_ids(rows: np.ndarray, left_row: np.ndarray, right_row: np.ndarray) -> np.ndarray:
    """Each of ``rows``' cluster: the smallest row of its connected component under the pairs
    (``left_row[i]``, ``right_row[i]``), so that an id names a row of the cluster and does not depend
    on the order the pairs come in. A row in no pair is its own cluster."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rows = np.asarray(rows, np.int64)
    a, b = np.searchsorted(rows, left_row), np.searchsorted(rows, right_row)
    graph = coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(len(rows), len(rows)))
    _, labels = connected_components(graph, directed=False)
    smallest = np.full(labels.max(initial=-1) + 1, np.iinfo(np.int64).max)
    np.minimum.at(smallest, labels, rows)
    return smallest[labels]


def with_clusters(matches: pa.Table, rows: np.ndarray) -> pa.Table:
    """``matches`` (a table against itself, pairs kept) with each pair's ``cluster`` (``rows``: the
    table's rows that were linked)."""
    return attach_clusters(matches, rows, cluster_ids(rows, matches["left_row"].to_numpy(),
                                                      matches["right_row"].to_numpy()))


def attach_clusters(matches: pa.Table, rows: np.ndarray, ids: np.ndarray) -> pa.Table:
    """``matches`` with each pair's ``cluster``: ``ids[i]`` is row ``rows[i]``'s (:func:`cluster_ids`
    over all the pairs kept, where ``matches`` is one part of them)."""
    per_pair = ids[np.searchsorted(np.asarray(rows, np.int64), matches["left_row"].to_numpy())]
    return matches.append_column("cluster", pa.array(per_pair, pa.int64()))
