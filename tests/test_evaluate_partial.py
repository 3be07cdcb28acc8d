"""``evaluate`` with partial flags is pinned ``recommend`` by construction (issue 23;
``benchmarks/evaluate_partial.py`` over every published row): a few published rows, the flags their
sources state, the same plan and step time from both; and both name what was chosen."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package

from benchmarks import evaluate_partial as EP  # noqa: E402

from planner.cli import main  # noqa: E402
from planner.tuning import TUNING  # noqa: E402

# (set, row): an era row (Megatron-LM 2021, unstated micro-batch), a tuned-table row, an FSDP2 row with BF16
# optimizer state, an MoE row with DeepEP and named recompute modules
ROWS = [("dev", "3"), ("new", "102"), ("new", "199"), ("new", "215")]


def _row(set_name, row_id):
    return next(r for r in EP.rows_of("all") if (r.set, r.row_id) == (set_name, row_id))


@pytest.mark.parametrize("key", ROWS, ids=lambda k: f"{k[0]}-{k[1]}")
def test_evaluate_of_the_stated_flags_is_pinned_recommend(key):
    row = _row(*key)
    flags = EP.stated_flags(row)
    est, chosen, note, _ = EP.run_evaluate(row, flags)
    rec, _ = EP.run_recommend(row, flags)
    assert note == ""  # a completion was found, not the framework-defaults fallback
    assert rec is not None
    assert est.step_time_s == pytest.approx(rec.step_time_s, rel=1e-9)
    assert est.config.to_dict() == rec.config.to_dict()
    stated = {f.split("=")[0].lstrip("-").replace("-", "_") for f in flags}
    assert set(chosen) == {k for k in TUNING if k not in stated and not (k == "sp" and "no_sp" in stated)} | (
        {"layers_per_stage"} if row.fixed["pp"] > 1 and "layers_per_stage" not in stated else set()
    )


def test_stated_flags_are_what_the_source_states():
    era = EP.stated_flags(_row("dev", "3"))  # Narayanan 2021: tp 4, no micro-batch stated, full recompute
    assert "--tp=4" in era and "--recompute=full" in era
    assert "--zero=0" in era and "--bucket-mb=0" in era  # Megatron-LM of 2021 had neither
    assert not any(f.startswith("--mb") or f.startswith("--chunks") for f in era)
    moe = EP.stated_flags(_row("new", "215"))
    assert "--ep-dispatcher=deepep" in moe and "--recompute-modules=layernorm,moe" in moe


def test_recommend_names_what_it_pinned_and_chose(capsys):
    problem = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq", "4096"]
    assert main(["recommend", *problem, "--tp", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["pinned"] == {"tp": 2}
    assert "tp" not in d["chosen"] and {"dp", "mb", "zero", "chunks", "bucket_mb"} <= set(d["chosen"])
    assert d["stack"]["name"] and isinstance(d["band_notes"], list)
    assert main(["recommend", *problem, "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "pinned by you: tp=2; chosen by the planner: " in out and "stack: " in out
