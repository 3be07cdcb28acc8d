"""``SolveResult.stats`` is a :class:`search.stats.SearchStats`: typed fields, and the JSON object in the order the
search set them (the CLI's output did not change when it stopped being a dict)."""

from __future__ import annotations


from search.stats import PresolveCounts, SearchStats


def test_to_dict_keeps_the_order_fields_were_set_in():
    st = SearchStats(space=3)  # the exhaustive path sets model_choices before kept, presolve's after
    st.model_choices = st.kept = st.probed = 3
    st.exhaustive_s = 0.5
    st.exhaustive = True
    assert list(st.to_dict()) == ["space", "model_choices", "kept", "probed", "exhaustive_s", "exhaustive"]
    pre = SearchStats.of_presolve(PresolveCounts(groups=2, kept=1, probed=1), 0.1, 1e-6)
    pre.model_choices = 1
    assert list(pre.to_dict()) == [
        "groups",
        "groups_memory",
        "groups_bound",
        "dominated",
        "memory",
        "bound",
        "kept",
        "probed",
        "presolve_s",
        "resolution_s",
        "model_choices",
    ]
    assert "near" not in pre.to_dict()  # None: not set


def test_merged_sums_numbers_but_the_resolution():
    a = SearchStats.of_presolve(PresolveCounts(groups=2, probed=1), 0.25, 1e-6)
    a.timed_out = "presolve"
    b = SearchStats.of_presolve(PresolveCounts(groups=3, probed=4), 0.5, 1e-6)
    m = SearchStats.merged([a, b])
    assert (m.groups, m.probed, m.presolve_s, m.resolution_s, m.timed_out) == (5, 5, 0.75, 1e-6, "presolve")
    assert list(m.to_dict()) == list(a.to_dict())
    assert SearchStats.merged([a]).to_dict() == a.to_dict()


def test_solve_sets_typed_stats():
    from costmodel.spec.presets import load_cluster, load_model
    from costmodel.spec.workload import Workload
    from search.problem import Limits, Problem
    from search.solve import SolveOptions, solve

    p = Problem(
        model=load_model("gpt-1.7b"),
        cluster=load_cluster("a100-80g").with_gpus(16),
        workload=Workload(global_batch=64, seq_len=2048),
    )
    r = solve(p, SolveOptions())
    assert isinstance(r.stats, SearchStats) and r.stats.groups > 0 and r.stats.model_choices >= 1
    assert r.solve_dict()["stats"] == r.stats.to_dict()
    refused = solve(Problem(model=p.model, cluster=p.cluster, workload=p.workload, limits=Limits(fixed={"tp": 3})))
    assert refused.status == "INFEASIBLE" and refused.solve_dict()["stats"] == {"refused": "tp"}
