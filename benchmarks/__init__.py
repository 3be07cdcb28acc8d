"""Validation against published runs, component checks, calibration and speed.

Each benchmark is a module run from the repository root as ``python -m benchmarks.<name>`` (``--help``
for its flags); none edits ``sys.path``. Those that record figures write ``benchmarks/results/<name>.json``
(:mod:`benchmarks.results_io`), which ``python -m benchmarks.render`` turns into ``RESULTS.md``.
"""
