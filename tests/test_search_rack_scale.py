"""Issue 39: the rack-scale MoE case (DeepSeek-V3 on 1,152 GB200 NVL72, TP up to 64 inside the 72-GPU NVLink domain)
is proven, not stopped by the clock.

The limit is generous on purpose (60 s; unloaded the whole recommend, both dispatcher searches and the margin solve
included, takes ~11 s at d109a90, ~8 s of it in presolve): the test fails when the search cannot prove the answer,
not when a loaded host is slow. The issue's target (<= 3 s) is measured by ``benchmarks/rack_scale.py``, not here."""

from planner import api


def test_deepseek_v3_on_1152_gb200_is_proven_optimal():
    r = api.recommend(
        "deepseek-v3",
        "gb200-nvl72",
        gpus=1152,
        global_batch=9216,
        seq=4096,
        dtype="fp8",
        time_limit_s=60.0,
    )
    assert r.status == "OPTIMAL", (r.status, r.explanation)
    assert r.stats.timed_out is None
    assert r.bound_s == r.objective_s  # proven: the bound meets the answer
    c = r.best.config
    assert c.tp * c.cp <= 72 and c.ep <= 72  # TP x CP and EP inside the NVLink domain
