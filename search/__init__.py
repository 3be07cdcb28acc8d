"""Search: candidate enumeration, CP-SAT formulation and exhaustive baseline."""
