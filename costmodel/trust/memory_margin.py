"""How far to trust a predicted peak memory: the memory model's measured margin.

A plan whose predicted peak per GPU fits the HBM may still run out of memory when the memory model
under-predicts. The memory benchmark (``benchmarks/component_memory.py``, RESULTS.md section 24)
scores the predicted total per GPU against the peak memory the allocator reserved in published
runs; :data:`MEMORY_MARGIN` is the largest under-prediction it measured, as a fraction of the
measured peak. A plan predicted at ``usable * (1 - MEMORY_MARGIN)`` or less would have fitted in
every measured case; one above it is *at risk*: it fits by the model, but within the model's
measured error of the limit.

The margin is a preference, not the fit test: a plan above it still fits (a published run that
ran must fit, issue 21), and ``planner recommend`` prefers a plan that keeps the margin when it
costs no more than the re-score band (``search.solve``). ``--headroom-gib`` stays the user's hard
margin; ``--memory-margin`` sets this one.

>>> round(safe_bytes(80.0, 0.1), 6)
72.0
>>> at_risk(75.0, 80.0, 0.1), at_risk(70.0, 80.0, 0.1)
(True, False)
"""

from __future__ import annotations

#: the largest under-prediction of measured max reserved memory per GPU in the memory benchmark
#: (``benchmarks/component_memory.py`` on h-mem4: 20 torchtitan runs, 18 since the two trainy_2506 cases were removed as kept for validation; worst case 18, Llama-3.1-405B
#: FSDP2 TP8 PP8 CP8 with Float8, predicted 77.1 GiB against 84.9 GiB measured, -9.1%; -11.3% on h-dropout
#: (case 11, 70B TP8), before DTensor SP's all-gathered GEMM inputs and the output head's inputs were charged);
#: ``tests/test_memory_margin.py`` recomputes it from the benchmark's data.
MEMORY_MARGIN = 0.091


def safe_bytes(usable_bytes: float, margin: float = MEMORY_MARGIN) -> float:
    """The predicted peak per GPU at or below which the measured under-predictions would still fit."""
    return usable_bytes * (1.0 - margin)


def at_risk(peak_bytes: float, usable_bytes: float, margin: float = MEMORY_MARGIN) -> bool:
    """True when ``peak_bytes`` fits ``usable_bytes`` only if the memory model errs less than it did."""
    return peak_bytes > safe_bytes(usable_bytes, margin)
