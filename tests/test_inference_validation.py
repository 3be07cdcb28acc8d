"""The published serving measurements: every row cites its source and can be predicted.

The sealed serving split (issue 40, ``benchmarks/data/sealed/README.md``) is checked for structure only:
no test predicts a sealed row (it is scored once, by ``validate_inference --sealed``)."""

import hashlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package (run alone, as the other benchmark tests do)
spec = importlib.util.spec_from_file_location("validate_inference", ROOT / "benchmarks" / "validate_inference.py")
vi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vi)
ROWS = vi.load_rows()


def test_rows_cite_their_source():
    assert len(ROWS) >= 20
    for r in ROWS:
        assert r["source_url"].startswith("https://") and r["source_location"], r["row_id"]
        assert r["metric"] in vi.METRICS and float(r["measured"]) > 0
        assert r["batching"] in vi.BATCHING


SEALED = vi.load_rows(vi.DATA_SEALED)
#: the serving sources before issue 40 (not candidates) and the six of issue 40, named before any row was placed
OLD_SOURCES = {"trtllm_v061", "trtllm_v05_latency", "nim_llama33_70b"}
NEW_SOURCES = {
    "trtllm_h200_launch_2023",
    "trtllm_perf_overview_v1_0_2025",
    "trtllm_perf_overview_pergpu_2025",
    "trtllm_perf_v0_5_0_2023",
    "vllm_nightly_latency_h200_2024",
    "trtllm_llama70b_h200_v07_2023",
}
#: issue 40, second batch (TTFT/TPOT sources), named before any of its rows was placed: k = 4, ceil(0.3 k) sealed
NEW_SOURCES_B = {
    "vllm_fp8_kv_cache_blog_2026",
    "sglang_cookbook_llama31_70b_a100_2026",
    "sglang_cookbook_qwen3_235b_b200_2026",
    "sglang_cookbook_deepseek_r1_b200_2026",
}


def _smallest(keys, s):
    return set(sorted(keys, key=lambda k: hashlib.sha256(k.encode()).hexdigest())[:s])


def test_sealed_serving_split_is_the_stated_rule():
    """ceil(0.3 N) of the N = 3 + 6 serving sources, the new ones with the smallest sha256(source_key), are
    sealed; of the second batch's k = 4, ceil(0.3 k) = 2 by the same order; the development file holds the rest
    and no sealed source; row ids are unique over both files."""
    sealed = _smallest(NEW_SOURCES, math.ceil(0.3 * (len(OLD_SOURCES) + len(NEW_SOURCES))))
    sealed_b = _smallest(NEW_SOURCES_B, math.ceil(0.3 * len(NEW_SOURCES_B)))
    assert sealed_b == {"sglang_cookbook_deepseek_r1_b200_2026", "sglang_cookbook_llama31_70b_a100_2026"}
    assert {r["source_key"] for r in SEALED} == sealed | sealed_b
    assert {r["source_key"] for r in ROWS} == OLD_SOURCES | (NEW_SOURCES - sealed) | (NEW_SOURCES_B - sealed_b)
    ids = [r["row_id"] for r in ROWS + SEALED]
    assert len(ids) == len(set(ids))
    assert list(SEALED[0]) == list(ROWS[0])  # one header


def test_sealed_rows_parse_without_a_prediction():
    """Structure only: each sealed row cites its source, names a metric, batching, presets and a plan the
    planner accepts (validate_inference), and predicts nothing."""
    from costmodel.serving.inference import validate_inference

    for r in SEALED:
        assert r["source_url"].startswith("https://") and r["source_location"], r["row_id"]
        assert r["metric"] in vi.METRICS and float(r["measured"]) > 0 and r["batching"] in vi.BATCHING
        model, cluster, w, c = vi.row_problem(r)
        assert c.gpus == int(r["gpus"]), r["row_id"]
        validate_inference(model, cluster, w, c)


def test_second_batch_seals_latency_rows():
    """The second batch gives the sealed split TTFT and TPOT rows (means, medians and P99s; counted, not predicted)."""
    lat = [r for r in SEALED if r["source_key"] in NEW_SOURCES_B and r["metric"].startswith(("ttft", "tpot"))]
    assert len(lat) >= 20
    assert {r["metric"] for r in lat} >= {
        "ttft_ms",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "tpot_ms",
        "tpot_p50_ms",
        "tpot_p99_ms",
    }
    assert {vi.engine_of(r) for r in lat} == {"sglang"}


def test_percentile_metrics_read_the_replay():
    """ttft_p*/tpot_p* read the replay's percentiles of the measured requests: ordered, and p50 near the mean of
    a closed loop whose requests are alike."""
    row = next(r for r in ROWS if r["source_key"] == "sglang_cookbook_qwen3_235b_b200_2026")
    e = vi.predict(row)
    for m in ("ttft", "tpot"):
        p50, p90, p99 = (vi.METRICS[f"{m}_p{q}_ms"](e) for q in (50, 90, 99))
        assert 0 < p50 <= p90 <= p99
        assert p50 == e.serving["percentiles_ms"][f"{m}_ms"]["p50"]
    assert vi.METRICS["tpot_p50_ms"](e) == pytest.approx(vi.METRICS["tpot_ms"](e), rel=0.25)


@pytest.mark.parametrize("row", ROWS, ids=[r["row_id"] for r in ROWS])
def test_every_row_is_predicted(row):
    e = vi.predict(row)
    assert vi.METRICS[row["metric"]](e) > 0


def test_script_prints_error_per_row(capsys):
    assert vi.main([]) == 0
    out = capsys.readouterr().out
    assert "err%" in out and "mean |err|" in out
    assert len([line for line in out.splitlines() if line[:3].strip().isdigit()]) == len(ROWS)


def test_issue_40_targets_read_the_median_rows_and_the_largest_factor():
    """Synthetic rows (no prediction): TTFT p50 at 10% and 29% (mean 19.5%, met), TPOT p50 at 15% (not
    met), no P90 row (absent, not met), and one throughput row predicted at 0.45x the measured (off by 2.2x)."""

    def row(metric, pred, meas):
        return {"metric": metric, "predicted": pred, "measured": meas, "error": pred / meas - 1}

    out = [
        row("ttft_p50_ms", 110, 100),
        row("ttft_p50_ms", 71, 100),
        row("tpot_p50_ms", 11.5, 10),
        row("tokens_per_s", 45, 100),
    ]
    head, targets = vi.issue_40_targets(out)
    met = {t["name"]: t["met"] for t in targets}
    assert head["ttft_p50_ms mean |err| %"] == pytest.approx(19.5)
    assert met["ttft_p50_ms: mean |err| <= 20%"] is True
    assert met["tpot_p50_ms: mean |err| <= 12%"] is False
    assert met["ttft_p90_ms: mean |err| <= 25% (no row states it)"] is False
    assert head["largest factor off"] == pytest.approx(2.22)
    assert met["no prediction off by more than 2x"] is False
