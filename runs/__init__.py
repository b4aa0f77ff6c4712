"""How stages run and report inside Prefect runs: the `Steps` a stage's tasks run by (the flow's
Prefect task runs, or a benchmark's measured ones), its artifacts (sent only in a run) and their
figures.

Shared by every stage, so a floor below tasks/: imports storage and Prefect, never pearl_model,
tasks, flows, pearl_cli or benchmarks.
"""
