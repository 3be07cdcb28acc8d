"""benchmarks.blackwell_moe_gap: the analysis aid runs and reads the rows it names (it asserts no error size)."""

from benchmarks.blackwell_moe_gap import residuals
from benchmarks.published import load_set


def test_residuals_cover_the_b200_moe_rows():
    out = {d["row"]: d for d in residuals(load_set("all"))}
    assert {"288", "289", "290", "291"} <= set(out)
    assert [out[r]["local"] for r in ("288", "289", "290", "291")] == [32, 16, 16, 16]
    for d in out.values():
        assert d["pred"] > 0 and d["meas"] > 0 and d["layer_gpu"] > 0 and d["host"] > 0
        assert d["host_grace"] >= d["host"]
        # the residual has the sign of measured - predicted
        assert (d["extra"] > 0) == (d["meas"] > d["pred"])
