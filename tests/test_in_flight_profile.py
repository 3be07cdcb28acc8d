"""``in_flight_profile`` keeps exactly the non-dominated in-flight vectors of Megatron's (interleaved) 1F1B order.

The reference below records every vector the schedule passes through and filters them pair by pair (the
definition, and the code before the O(n k v) filter that took 0.5 s of GPT-1T's search); the function must
return the same tuples on a grid of pipeline shapes.
"""

import pytest

from costmodel.spec.stages import in_flight_profile, warmup_forwards


def reference(p: int, m: int, v: int, stage: int) -> tuple:
    T, W = m * v, warmup_forwards(p, m, v, stage)
    held, seen = [0] * v, set()
    for k in range(T):  # the whole schedule, no shortcut
        held[(k // p) % v] += 1
        seen.add(tuple(held))
        if k >= W:
            j = k - W
            held[v - 1 - (j // p) % v] -= 1
    if W == T:
        seen.add(tuple(held))
    return tuple(
        sorted((a for a in seen if not any(b != a and all(x >= y for x, y in zip(b, a)) for b in seen)), reverse=True)
    )


@pytest.mark.parametrize("p,v", [(1, 1), (2, 1), (4, 2), (4, 3), (8, 1), (8, 4), (5, 2), (16, 2), (32, 4)])
def test_same_vectors_as_the_definition(p, v):
    for m in sorted({p, 2 * p, 3 * p + 1, 16, 64}):
        for stage in range(p):
            assert in_flight_profile(p, m, v, stage) == reference(p, m, v, stage), (p, m, v, stage)


def test_no_kept_vector_dominates_another():
    prof = in_flight_profile(32, 256, 4, 0)
    for a in prof:
        assert not any(b != a and all(x >= y for x, y in zip(b, a)) for b in prof)
