"""The MoE table's num_tokens axis read affinely in the timed rank's load, not in num_tokens (issue 38;
benchmarks/notes/2026-12-05-table-interpolation.md, "MoE Ampere: the routing generator's load"): the load
follows AIConfigurator's routing generators (collector/helper.py ``balanced_logits``,
collector/trtllm/collect_moe.py ``power_law_logits_v3``), the line leaves its neighbours' range only
within ``a, b >= 0`` and says ``extrapolated`` there."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.component_tables import held_positions, moe_heldout
from costmodel.physics.tables import moe as moe_mod
from costmodel.physics.tables.grid import affine_in
from costmodel.physics.tables.moe import interp_tokens, load_coordinate, local_load, moe_lookup, ridge_tokens
from costmodel.physics.tables.store import load, table_for


def _balanced_port(tokens, experts, topk, ep):
    """A literal loop port of ``balanced_logits``' expert choice, then rank 0's experts."""
    stride = math.ceil(experts / topk)
    cnt = [0] * experts
    for t in range(tokens):
        for i in range(topk):
            e = (t + i * stride) % experts if tokens >= stride else int((t * stride / tokens + i * stride) % experts)
            cnt[e] += 1
    loc = cnt[: experts // ep]
    return sum(c > 0 for c in loc), sum(loc)


def _power_law_port(rng, tokens, experts, topk, ep, alpha):
    """A literal loop port of ``power_law_logits_v3``'s per-expert counts for one draw, then rank 0's."""
    lo, hi = (1, tokens * 0.8) if tokens * topk > experts else (0.01, 2)
    u = rng.random(experts)
    w = ((hi ** (1 - alpha) - lo ** (1 - alpha)) * u + lo ** (1 - alpha)) ** (1 / (1 - alpha))
    target = tokens * topk
    cnt = np.round(w / w.sum() * target).astype(np.int64)
    delta = target - int(cnt.sum())
    order = np.argsort(-cnt, kind="stable")
    if delta > 0:
        for i in range(delta):
            cnt[order[i % experts]] += 1
    else:
        for i in range(-delta):
            j = order[-(i % experts) - 1]
            if cnt[j] > 0:
                cnt[j] -= 1
            else:
                cnt[np.argmax(cnt)] -= 1
    grp = cnt.reshape(ep, experts // ep)
    loc = grp[int(np.argmax(grp.sum(1)))]
    return int((loc > 0).sum()), int(loc.sum())


@pytest.mark.parametrize("shape", [(1, 256, 8, 8), (7, 256, 8, 8), (32, 256, 8, 8), (100, 128, 8, 4), (5, 8, 2, 2)])
def test_balanced_load_matches_the_generator(shape):
    assert local_load(*shape, "balanced") == tuple(float(v) for v in _balanced_port(*shape))


def test_balanced_load_hits_every_local_expert_from_ceil_e_over_topk():
    assert local_load(32, 256, 8, 8, "balanced") == (32.0, 32.0)  # T = 256 / 8: each expert once
    assert local_load(64, 256, 8, 8, "balanced") == (32.0, 64.0)
    assert local_load(16, 256, 8, 8, "balanced")[0] == 16.0  # half the experts, spread over every rank


@pytest.mark.parametrize("shape", [(4, 256, 8, 4), (8, 384, 8, 8), (64, 128, 8, 8), (512, 8, 2, 2)])
def test_power_law_load_is_the_generator_mean(shape):
    rng = np.random.default_rng(7)
    ports = np.array([_power_law_port(rng, *shape, 1.01) for _ in range(400)], dtype=float)
    n, assigned = local_load(*shape, "power_law_1.01")
    assert n == pytest.approx(ports[:, 0].mean(), rel=0.06, abs=0.3)
    assert assigned == pytest.approx(ports[:, 1].mean(), rel=0.06, abs=0.3)


def test_power_law_small_counts_land_on_the_timed_rank_then_spread():
    """Every share rounds to zero while ``T topk`` is small against the experts: the fix-up hands all
    ``T topk`` assignments to the first experts, one each, all local; one doubling later they spread."""
    for tokens in (1, 2, 4):
        assert local_load(tokens, 384, 8, 8, "power_law_1.01") == pytest.approx((8.0 * tokens, 8.0 * tokens), rel=0.02)
    n8, l8 = local_load(8, 384, 8, 8, "power_law_1.01")
    assert n8 < 12 and l8 < 20  # of 64 assignments, the busiest of 8 ranks gets about 15
    assert local_load(4, 384, 8, 64, "power_law_1.01")[0] == pytest.approx(6.0)  # 6 local experts, all hit


def test_ridge_is_the_roofline_ridge_of_the_tables_gpu():
    assert ridge_tokens("a100_sxm", 0) == pytest.approx(312e12 / 2039e9)  # BF16: 2 bytes x rate 1 / 2
    assert ridge_tokens("h100_sxm", 1) == pytest.approx(ridge_tokens("h100_sxm", 0))  # fp8: half the bytes, 2x rate
    assert ridge_tokens("b200_sxm", 4) == pytest.approx(ridge_tokens("b200_sxm", 0) / 4)  # w4a16: 4-bit, BF16 rate


def test_affine_in_is_exact_inside_and_bounded_outside():
    t = lambda c: 0.1 + 0.03 * c  # noqa: E731 - a floor plus one expert's read per unit of load
    assert affine_in(10.0, 30.0, 17.0, t(10), t(30), (4, 16, 8))[0] == pytest.approx(t(17))
    assert affine_in(30.0, 10.0, 17.0, t(30), t(10), (4, 16, 8)) == (pytest.approx(t(17)), 0.0)
    # outside: the line, held within [t_n c / c_n, t_n] of the nearer value
    v, beyond = affine_in(30.0, 10.0, 5.0, t(30), t(10), (4, 16, 8))
    assert v == pytest.approx(t(5)) and beyond == pytest.approx(1.0)
    steep, _ = affine_in(30.0, 10.0, 2.0, 3.0, 0.2, (4, 16, 8))  # the line would go below zero
    assert steep == pytest.approx(0.2 * 2.0 / 10.0)
    flat, _ = affine_in(10.0, 30.0, 40.0, 0.5, 0.4, (4, 16, 8))  # a falling line beyond the larger load
    assert flat == pytest.approx(0.4)
    # equal loads: nothing but the axis tells the two apart
    assert affine_in(6.0, 6.0, 6.0, 0.2, 0.3, (4.0, 16.0, 8.0)) == (pytest.approx(0.2 + 0.1 * 4 / 12), 0.0)


def test_a100_held_out_count_follows_the_load_not_the_tokens():
    """Kimi-K2's shape on tp 2, ep 8 in the A100 table: 0.97 ms at T = 4 (32 local experts), 0.26 ms at
    T = 8 (spread), 0.47 ms at T = 16. Affine in T puts T = 8 at 0.81 ms (+215%); the load puts it
    at 0.29 ms (+15%; the extension from T = 16 within a, b >= 0)."""
    z = load(table_for("A100-SXM4-80GB", "moe").file)
    cfg, tok, lat = z["cfg"], z["tokens"], z["lat_ms"].astype(float)
    i = next(i for i, r in enumerate(cfg.tolist()) if r == [0, 1, 7168, 2048, 8, 384, 2, 8])
    j = list(tok).index(8)
    keep = [k for k in range(len(tok)) if k not in held_positions(len(tok))]
    ridge = ridge_tokens("a100_sxm", 0)
    ms, corners, on_point, _, beyond = interp_tokens(tok[keep], lat[i, keep], 8, 384, 8, 8, "power_law_1.01", ridge)
    assert not on_point and [int(tok[keep][c]) for c in corners] == [4, 16]
    assert ms == pytest.approx(lat[i, j], rel=0.20) and beyond > 0
    affine_t = lat[i, j - 1] + (lat[i, j + 1] - lat[i, j - 1]) * (8 - 4) / (16 - 4)
    assert affine_t > 2.5 * lat[i, j]


def test_lookup_says_extrapolated_where_the_load_leaves_its_neighbours():
    c = [load_coordinate(t, 384, 8, 8, "power_law_1.01", ridge_tokens("a100_sxm", 0)) for t in (4, 7, 8)]
    assert c[1] < min(c[0], c[2])  # T = 7 loads the rank less than T = 8 does, and T = 4 far more
    t7, ev = moe_lookup("A100-SXM4-80GB", "bf16", 7, 7168, 2048, 8, 384, 2, 8)
    t8, ev8 = moe_lookup("A100-SXM4-80GB", "bf16", 8, 7168, 2048, 8, 384, 2, 8)
    assert ev.kind == "extrapolated" and ev.distance > 0 and "outside its grid neighbours" in ev.note
    assert ev8.kind == "measured"
    assert t8 * c[1] / c[2] <= t7 <= t8  # within a, b >= 0 from the nearer value (T = 8)
    t6, ev6 = moe_lookup("A100-SXM4-80GB", "bf16", 6, 7168, 2048, 8, 384, 2, 8)
    assert ev6.kind == "interpolated"


def test_benchmark_predicts_moe_with_the_package_lookup(monkeypatch):
    calls = []
    real = moe_mod.interp_tokens

    def spy(*a):
        calls.append(a[2:])
        return real(*a)

    monkeypatch.setattr(moe_mod, "interp_tokens", spy)
    rows = moe_heldout()
    assert sum(len(r["err"]) for r in rows) == len(calls)
    a100 = next(r for r in rows if r["system"] == "a100_sxm")
    assert len(a100["err"]) == 2086  # the rule's held-out points, none dropped
    assert np.mean(np.abs(a100["err"])) < 0.05
