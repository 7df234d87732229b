"""Benchmarks of adapter-bert, run from the repository root as `python -m bench.<name>`.

`bench.harness` runs a runner command and writes results; `bench.tables` writes the result
tables of the documents from `bench/results/*.json`.
"""
