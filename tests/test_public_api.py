"""planner's Python API: the module-level ``recommend`` and ``Planner.recommend`` answer an infeasible
problem alike; one spelling per concept (``tp_max`` as ``--tp-max``, ``top_k``; the old ``max_tp`` warns);
``Planner.evaluate_many`` scores what cannot run (an impossible plan, a chunk count the framework cannot
run, an entry that is not a config) as invalid, in order, instead of raising; ``planner.__version__`` and
``planner --version`` agree.
"""

import json
import subprocess
import sys
import warnings

import pytest

import planner
from planner import Planner, cli


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


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
    bad = p.evaluate_many([{"warp": 2}])[0]  # not a config at all: scored invalid too
    assert bad.status == "invalid" and bad.config is None and "warp" in bad.reason


def test_evaluate_many_scores_what_the_framework_cannot_run_invalid():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    # Megatron-Core's only chunked overlap is TE userbuffers: chunks = tp (costmodel.frameworks.rules)
    bad, good = p.evaluate_many([{"tp": 4, "sp": True, "chunks": 8}, {"tp": 4, "sp": True, "chunks": 4}])
    assert bad.status == "invalid" and "chunks=8" in bad.reason and not bad.ok
    assert good.status == "ok"
    assert [s.config.chunks for s in p.rank([{"tp": 4, "sp": True, "chunks": c} for c in (8, 4, 1)])] in (
        [4, 1],
        [1, 4],
    )
    exact = p.evaluate_many([{"tp": 4, "sp": True, "chunks": 8}], exact=True)[0]
    assert exact.status == "invalid"


def test_evaluate_many_scores_every_bad_entry_and_keeps_the_order():
    p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
    entries = [{"tp": 2}, {"tpp": 2}, {"tp": "x"}, {"tp": 0}, {"zero": 5}, {"recompute": "foo"}, "tp=2", {"tp": 4}]
    scores = p.evaluate_many(entries)
    assert [s.status for s in scores] == ["ok"] + ["invalid"] * 6 + ["ok"]
    assert "tpp" in scores[1].reason and scores[1].config is None and scores[1].to_dict()["config"] is None
    assert "zero=5" in scores[4].reason
    json.dumps([s.to_dict() for s in scores])  # the invalid entries serialise too


def test_version(capsys):
    assert isinstance(planner.__version__, str) and planner.__version__[0].isdigit()
    code, out, err = run(capsys, ["--version"])
    assert code == 0 and out.strip() == f"planner {planner.__version__}" and err == ""
    p = subprocess.run([sys.executable, "-m", "planner", "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"planner {planner.__version__}"
