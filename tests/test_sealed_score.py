"""The sealed split's single score as recorded (benchmarks.validate_published --set sealed): synthetic rows only,
no sealed row is predicted here."""

import pytest

from benchmarks import validate_published as vp


def row(source, err, gpu="H100", regimes="h100_bf16_dense"):
    return {"source": source, "error": err, "gpu": gpu, "regimes": regimes}


def test_the_targets_read_the_whole_split_and_its_blackwell_or_moe_rows():
    res = [
        row("a", 0.05),
        row("a", -0.07),
        row("b", 0.02, gpu="B200"),  # Blackwell
        row("c", -0.20, regimes="moe_ep;moe_fine"),  # MoE on Hopper
    ]
    head, table, targets = vp.sealed_summary(res, skipped=2)
    met = {t["name"]: t["met"] for t in targets}
    assert head["rows predicted"] == 4 and head["rows skipped"] == 2
    assert head["mean |err| %"] == pytest.approx(8.5) and head["signed %"] == pytest.approx(-5.0)
    assert met["issue 38: sealed mean |err| <= 8%"] is False
    assert met["issue 38: sealed signed mean within +-5%"] is True  # -5.0% sits on the limit
    assert head["Blackwell/MoE rows"] == 2 and head["Blackwell/MoE mean |err| %"] == pytest.approx(11.0)
    assert met["issue 39: sealed Blackwell/MoE rows mean |err| <= 10%"] is False
    assert [r["source"] for r in table] == ["a", "b", "c"] and table[0]["rows"] == 2


def test_no_blackwell_or_moe_row_is_not_a_met_target():
    _, _, targets = vp.sealed_summary([row("a", 0.01)], skipped=0)
    assert [t["met"] for t in targets] == [True, True, False]
