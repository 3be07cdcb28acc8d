"""Issue 12, items 3 (headroom refusal), 6 (contradicting flags) and 9 (one API).

Refusals exit 2 with one stderr line naming the field, the value and what is allowed; the
module-level ``recommend`` and ``Planner.recommend`` answer an infeasible problem the same
way; one spelling per concept (``tp_max`` as ``--tp-max``, ``top_k``).
"""

import subprocess
import sys
import warnings

import pytest

import planner
from costmodel.spec.errors import SpecError
from costmodel.spec.units import GiB
from planner import Planner, cli, evaluate
from planner.report import estimate_text
from search.problem import Limits

SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, argv, field):
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith(f"planner: error: {field}="), err
    return err


# --------------------------------------------------------------------------- item 3: headroom
@pytest.mark.parametrize("gib", ["100", "80"])
def test_headroom_at_or_above_hbm_is_refused(capsys, gib):
    err = refused(capsys, ["recommend", *SMALL, "--headroom-gib", gib], "headroom_gib")
    assert "below the device HBM 80.0 GiB" in err and "usable" not in err


def test_headroom_at_or_above_hbm_is_refused_by_the_api():
    with pytest.raises(SpecError) as e:
        planner.recommend("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096,
                          limits=Limits(headroom_bytes=100 * GiB))
    assert e.value.field == "headroom_gib" and e.value.value == 100


# --------------------------------------------------------------------------- item 6: contradictions
def test_zero3_with_no_zero3_is_refused(capsys):
    err = refused(capsys, ["recommend", *SMALL, "--zero", "3", "--no-zero3"], "zero")
    assert "--no-zero3" in err


@pytest.mark.parametrize("command", ["evaluate", "explain"])
@pytest.mark.parametrize("tp", [[], ["--tp", "1"]])
def test_sp_without_tensor_parallelism_is_refused(capsys, command, tp):
    err = refused(capsys, [command, *SMALL, *tp, "--sp"], "sp")
    assert "tp=1" in err


def test_reports_show_the_effective_sequence_parallelism(capsys):
    e = evaluate("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, sp=True)  # tp=1: sp has no effect
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    text = estimate_text(e, load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8),
                         Workload(global_batch=64, seq_len=4096))
    assert " sp=off " in text and "sp=on" not in text
    code, out, _ = run(capsys, ["evaluate", *SMALL, "--tp", "2", "--sp"])
    assert code == 0 and " sp=on " in out


# --------------------------------------------------------------------------- item 9: one API
def test_module_and_planner_recommend_answer_infeasible_problems_alike():
    kw = dict(gpus=1, global_batch=8, seq=4096)
    module = planner.recommend("llama3-70b", "h100-sxm", **kw)
    method = Planner(model="llama3-70b", cluster="h100-sxm", **kw).recommend()
    for r in (module, method):
        assert r.status == "INFEASIBLE" and r.best is None and r.plans == []
        assert "no plan fits in memory" in r.explanation
    assert module.explanation == method.explanation


def test_one_spelling_for_bounds_and_top_k():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    r = p.recommend(top_k=2, constraints={"tp_max": 2, "pp_max": 1})
    assert len(r.plans) == 2 and all(x.config.tp <= 2 and x.config.pp == 1 for x in r.plans)
    m = planner.recommend("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, top_k=1, tp_max=2, pp_max=1)
    assert m.best.config.tp <= 2 and m.best.config.pp == 1
    assert all(c.tp <= 2 for c in p.space(tp_max=2, pp=1, zero=1, mb=1))
    with pytest.warns(DeprecationWarning, match="tp_max"):  # the old spelling still works, once more
        old = p.space(max_tp=2, pp=1, zero=1, mb=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert old == p.space(tp_max=2, pp=1, zero=1, mb=1)


def test_evaluate_many_scores_an_impossible_plan_invalid_instead_of_raising():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    scores = p.evaluate_many([{"tp": 3}, {"tp": 2}])
    assert [s.status for s in scores] == ["invalid", "ok"]
    assert scores[0].config.tp == 3 and "tp*pp*cp=3" in scores[0].reason and not scores[0].ok
    bad = p.evaluate_many([{"warp": 2}])[0]  # not a config at all: scored invalid too (issue 24, item 8)
    assert bad.status == "invalid" and bad.config is None and "warp" in bad.reason


def test_version(capsys):
    assert isinstance(planner.__version__, str) and planner.__version__[0].isdigit()
    code, out, err = run(capsys, ["--version"])
    assert code == 0 and out.strip() == f"planner {planner.__version__}" and err == ""
    p = subprocess.run([sys.executable, "-m", "planner", "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"planner {planner.__version__}"
