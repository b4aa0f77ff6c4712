"""Linking tables of names: reading a side, a vector index, top-k matches, dedupe clusters, thresholds.

Plain functions on arrays and pyarrow tables, no Prefect or Dask, so that a flow can call them per
partition: read a side (:mod:`.sides`), encode its distinct names and index them (:mod:`.index`),
query a batch and keep the top k (:mod:`.matches`), group duplicates (:mod:`.clusters`), and choose
a threshold for a target precision from labelled pairs (:mod:`.thresholds`).
"""
