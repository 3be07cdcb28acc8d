"""The DMA-engine assignment (costmodel.physics.comm.dma): enumeration, parsing, bandwidth, monotonicity, engines agree."""

import functools
import json
import math
import subprocess
import sys
from dataclasses import replace

import pytest

from costmodel.physics.comm import dma
from costmodel.spec import dma_plan
from costmodel.physics.comm.collectives import collective_time_s
from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.specs import DmaEngineClass
from costmodel.spec.workload import Workload

SG = load_cluster("sg2262-like").with_gpus(64)
GPT = load_model("gpt-1.7b") if True else None
W = Workload(global_batch=64, seq_len=2048)
PLAN = ParallelConfig(tp=8, pp=4, dp=2, mb=1, vp=2, sp=True, chunks=2, bucket_bytes=25e6)  # tp, pp, dp


def _with_cdma(cluster, count):
    dev = cluster.device
    engines = tuple(replace(e, count=count) if e.name == "cdma" else e for e in dev.dma_engines)
    return replace(cluster, device=replace(dev, dma_engines=engines))


def _step(cluster, c, engine, model=GPT, w=W):
    return evaluate(model, cluster, w, c, engine=engine).step_time_s


# --------------------------------------------------------------------------- enumeration
def test_streams_follow_the_plan():
    assert dma.used_streams(PLAN) == ("tp", "pp", "dp")
    assert dma.used_streams(ParallelConfig(dp=8, zero=3)) == ("zero",)  # FSDP-like: gathers and reduce-scatters
    assert dma.used_streams(ParallelConfig(tp=8, dp=8, zero=1)) == ("tp", "dp", "zero")
    assert dma.used_streams(ParallelConfig(tp=8)) == ("tp",)
    tied = replace(GPT, tied_embeddings=True)
    assert "dp" in dma.used_streams(ParallelConfig(tp=8, pp=8), tied)  # the embedding all-reduce
    assert "dp" not in dma.used_streams(ParallelConfig(tp=8, pp=8), replace(GPT, tied_embeddings=False))


def test_enough_engines_compositions_default_first():
    alls = dma.assignments(SG, PLAN, GPT)
    assert [str(a) for a in alls] == [
        "tp:cdma*2,pp:cdma*1,dp:cdma*1",
        "tp:cdma*1,pp:cdma*1,dp:cdma*2",
        "tp:cdma*1,pp:cdma*2,dp:cdma*1",
    ]
    assert alls[0] == dma.default_assignment(SG, PLAN, GPT)
    assert alls == dma.assignments(SG, PLAN, GPT)  # deterministic
    for a in alls:  # every stream alone, >= 1 engine each, all 4 used
        assert all(len(g.streams) == 1 and g.engines >= 1 for g in a.groups)
        assert sum(g.engines for g in a.groups) == 4
    eight = _with_cdma(SG, 8)
    assert len(dma.assignments(eight, PLAN, GPT)) == math.comb(7, 2)


def test_fewer_engines_than_streams_share_in_groups():
    c = ParallelConfig(tp=8, pp=2, dp=4, zero=1)  # tp, pp, dp, zero
    two = _with_cdma(SG, 2)
    alls = dma.assignments(two, c, GPT)
    assert len(alls) == 7  # Stirling S(4, 2)
    for a in alls:
        assert len(a.groups) == 2 and all(g.engines == 1 for g in a.groups)
        assert sorted(s for g in a.groups for s in g.streams) == sorted(dma.used_streams(c))
    # default: groups as even as possible, streams ordered intra-node first (inter-node ones share the NIC anyway)
    assert str(alls[0]) == "tp+pp:cdma*1,dp+zero:cdma*1"
    one = _with_cdma(SG, 1)
    assert [str(a) for a in dma.assignments(one, c, GPT)] == ["tp+pp+dp+zero:cdma*1"]


def test_only_classes_serving_the_scope():
    dev = SG.device
    nic = DmaEngineClass(name="nic", count=2, bw_bytes_per_s=50e9, scopes=("inter",))
    cdma = replace(dev.dma_engines[0], scopes=("intra",))
    cl = replace(SG, device=replace(dev, dma_engines=(cdma, nic)))
    alls = dma.assignments(cl, PLAN, GPT)
    for a in alls:  # tp stays in the node (cdma); pp and dp cross nodes (nic)
        assert a.group_of("tp").engine == "cdma" and a.group_of("tp").engines == 4
        assert {a.group_of("pp").engine, a.group_of("dp").engine} == {"nic"}
    assert len(alls) == 1
    with pytest.raises(SpecError, match="for the pp stream"):
        validate_config(GPT, cl, W, replace(PLAN, dma="tp:cdma*2,pp:cdma*1,dp:nic*2"))


# --------------------------------------------------------------------------- parse / format
@pytest.mark.parametrize("text", ["tp:cdma*2,pp:cdma*1,dp:cdma*1", "tp+dp:cdma*1,pp:cdma*3", "zero:nccl-sm*4"])
def test_round_trip(text):
    a = dma_plan.parse(text)
    assert str(a) == text and dma_plan.parse(str(a)) == a and dma_plan.parse(a.to_dict()) == a
    assert dma_plan.parse(json.loads(json.dumps(a.to_dict()))) == a


def test_parse_is_order_free_and_takes_the_short_dict():
    assert dma_plan.parse("dp:cdma*1, pp:cdma*1 ,tp:cdma*2") == dma_plan.parse("tp:cdma*2,pp:cdma*1,dp:cdma*1")
    assert dma_plan.parse({"tp": "cdma*2", "dp": "cdma*2"}) == dma_plan.parse("tp:cdma*2,dp:cdma*2")
    c = ParallelConfig.from_dict({**PLAN.to_dict(), "dma": "tp:cdma*2,pp:cdma*1,dp:cdma*1"})
    assert c.dma == dma_plan.parse("tp:cdma*2,pp:cdma*1,dp:cdma*1") and c.to_dict()["dma"] == str(c.dma)
    assert "dma" not in PLAN.to_dict()  # plans without an assignment keep their keys


@pytest.mark.parametrize("bad", ["tp", "tp:cdma", "tp:cdma*0", "tp:cdma*x", "xx:cdma*1", "", "tp:*2", 3])
def test_parse_errors_name_the_field(bad):
    with pytest.raises(SpecError) as e:
        dma_plan.parse(bad)
    assert str(e.value).startswith("dma=") and "must be" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text, words",
    [
        ("tp:cdma*2,pp:cdma*1", "each stream the plan uses"),  # dp missing
        ("tp:cdma*2,pp:cdma*1,dp:cdma*1,cp:cdma*1", "and no other"),  # cp not used
        ("tp:cdma*3,pp:cdma*1,dp:cdma*1", "at most 4 cdma engines"),
        ("tp:gdma*1,pp:cdma*1,dp:cdma*1", "for the tp stream"),  # gdma serves no collectives
        ("tp:xdma*1,pp:cdma*1,dp:cdma*1", "engine classes of"),
        ("tp+pp:cdma*1,pp:cdma*1,dp:cdma*1", "one group only"),
    ],
)
def test_check_errors(text, words):
    with pytest.raises(SpecError, match="dma=") as e:
        validate_config(GPT, SG, W, replace(PLAN, dma=text))
    assert words in str(e.value)


def test_cli_refuses_a_bad_assignment_in_one_line():
    cmd = [
        sys.executable,
        "-m",
        "planner",
        "evaluate",
        "--model",
        "gpt-1.7b",
        "--cluster",
        "sg2262-like",
        "--gpus",
        "64",
        "--global-batch",
        "64",
        "--seq",
        "2048",
        "--tp",
        "8",
        "--pp",
        "4",
        "--dma",
        "tp:cdma*3,pp:cdma*1,dp:cdma*1",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "dma=" in r.stderr and "at most 4 cdma engines" in r.stderr
    r = subprocess.run(cmd[:-1] + ["tp:cdma"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: dma=") or "dma='tp:cdma'" in r.stderr


def test_cli_json_and_explain_say_the_assignment():
    base = [
        sys.executable,
        "-m",
        "planner",
        "{}",
        "--model",
        "gpt-1.7b",
        "--cluster",
        "sg2262-like",
        "--gpus",
        "64",
        "--global-batch",
        "64",
        "--seq",
        "2048",
        "--tp",
        "8",
        "--pp",
        "4",
        "--dma",
        "tp:cdma*1,pp:cdma*1,dp:cdma*2",
    ]
    run = lambda sub, *extra: subprocess.run(
        [a.format(sub) for a in base] + list(extra),  # noqa: E731
        capture_output=True,
        text=True,
    )
    r = run("evaluate", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["dma_assignment"]["text"] == "tp:cdma*1,pp:cdma*1,dp:cdma*2"
    assert d["dma_assignment"]["streams"]["dp"] == {"engine": "cdma", "engines": 2, "pool": "cdma/dp"}
    r = run("explain", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["dma_assignment"]["text"] == "tp:cdma*1,pp:cdma*1,dp:cdma*2"
    assert {row["strategy"]: row["engines"] for row in d["overlap"]}["dp"] == "cdma*2"
    r = run("explain")
    assert r.returncode == 0, r.stderr
    head, *rows = r.stdout.splitlines()[3:]  # the config and placement lines, a blank line, the table
    assert "engines" in head and any(row.startswith("dp") and "cdma*2" in row for row in rows)


# --------------------------------------------------------------------------- bandwidth
def test_bandwidth_is_engines_times_per_engine_bandwidth_under_the_link():
    cdma = SG.device.engines_for("intra")
    t = {n: collective_time_s("allgather", 1e9, 8, 1, SG, engines=(cdma, n)) for n in (1, 2, 4)}
    lat = collective_time_s("allgather", 1.0, 8, 1, SG, engines=(cdma, 4))
    assert (t[1] - lat) / (t[2] - lat) == pytest.approx(2.0, rel=1e-3)  # 64 vs 128 GB/s
    assert t[4] == collective_time_s("allgather", 1e9, 8, 1, SG)  # all 4: as before
    eight = _with_cdma(SG, 8)
    e8 = eight.device.engines_for("intra")
    # 8 x 64 = 512 GB/s exceeds the link's 448 x 0.85: the link bounds it
    assert collective_time_s("allgather", 1e9, 8, 1, eight, engines=(e8, 8)) == collective_time_s(
        "allgather", 1e9, 8, 1, eight, engines=(e8, 6)
    )


def test_link_bound_engines_do_not_cap():
    h100 = load_cluster("h100-sxm")
    sm = h100.device.engines_for("intra")
    assert collective_time_s("allreduce", 1e9, 8, 1, h100, engines=(sm, 1)) == collective_time_s(
        "allreduce", 1e9, 8, 1, h100
    )


# --------------------------------------------------------------------------- monotonicity
@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_fewer_engines_for_a_stream_never_faster(engine):
    full = _step(SG, replace(PLAN, dma="tp:cdma*2,pp:cdma*1,dp:cdma*1"), engine)
    for fewer in ("tp:cdma*1,pp:cdma*1,dp:cdma*1", "tp+pp:cdma*1,dp:cdma*1", "tp:cdma*2,pp+dp:cdma*1"):
        assert _step(SG, replace(PLAN, dma=fewer), engine) >= full * (1 - 1e-9), fewer
    assert _step(SG, replace(PLAN, dma="tp:cdma*1,pp:cdma*1,dp:cdma*1"), engine) > full  # tp is bandwidth-bound


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_fewer_engines_in_the_class_never_faster(engine):
    for c in (PLAN, ParallelConfig(tp=8, pp=2, dp=4, zero=1, bucket_bytes=25e6)):
        best = [
            min(_step(_with_cdma(SG, n), replace(c, dma=a), engine) for a in dma.assignments(_with_cdma(SG, n), c, GPT))
            for n in (1, 2, 4, 8)
        ]
        assert all(b >= a * (1 - 1e-9) for a, b in zip(best[1:], best)), best
        default = [_step(_with_cdma(SG, n), c, engine) for n in (1, 2, 4, 8)]
        assert all(b >= a * (1 - 1e-9) for a, b in zip(default[1:], default)), default


# --------------------------------------------------------------------------- NVIDIA unchanged, engines agree
def _clear_caches():
    for name, mod in list(sys.modules.items()):
        if name.startswith("costmodel"):
            for v in vars(mod).values():
                if isinstance(getattr(v, "cache_clear", None), type(functools.lru_cache()(lambda: 0).cache_clear)):
                    v.cache_clear()


NVIDIA = [  # (model, cluster, gpus, batch, seq, plan): dense, ZeRO-1/3, CP, MoE with five streams on four engines
    ("gpt3-175b", "a100-80g", 64, 64, 2048, dict(tp=8, pp=8, vp=3, sp=True, chunks=4)),
    ("llama3-70b", "h100-sxm", 64, 128, 8192, dict(tp=4, pp=4, dp=2, cp=2, vp=5, sp=True, chunks=4, zero=1)),
    ("llama3-8b", "h100-sxm", 32, 64, 32768, dict(tp=2, cp=4, dp=4, sp=True, zero=3, recompute="full")),
    ("mixtral-8x7b", "h100-sxm", 64, 256, 4096, dict(tp=2, pp=4, dp=8, ep=8, chunks=2, zero=1, sp=True)),
]


@pytest.mark.parametrize("case", NVIDIA, ids=lambda c: c[0])
def test_nvidia_default_reproduces_the_engine_classes(case, monkeypatch):
    model, cluster, gpus, batch, seq, plan = case
    m, cl, w = load_model(model), load_cluster(cluster).with_gpus(gpus), Workload(global_batch=batch, seq_len=seq)
    c = ParallelConfig(**plan)
    _clear_caches()
    new = [evaluate(m, cl, w, c, engine=e).step_time_s for e in ("analytic", "graph")]
    monkeypatch.setattr(dma, "resolve", lambda *a, **k: None)  # every stream on its class, all engines (before)
    _clear_caches()
    old = [evaluate(m, cl, w, c, engine=e).step_time_s for e in ("analytic", "graph")]
    monkeypatch.undo()
    _clear_caches()
    assert new == pytest.approx(old, rel=1e-12)


@pytest.mark.parametrize("text", ["tp:cdma*1,pp:cdma*1,dp:cdma*2", "tp:cdma*1,pp+dp:cdma*1", "tp+pp+dp:cdma*1"])
def test_engines_honour_a_non_default_assignment_and_agree(text):
    c = replace(PLAN, dma=text)
    a, g = _step(SG, c, "analytic"), _step(SG, c, "graph")
    a0, g0 = _step(SG, PLAN, "analytic"), _step(SG, PLAN, "graph")
    assert a > a0 and g > g0  # both slower than the default, which gives tp two engines
    assert abs(a - g) / g <= 0.10  # tests/test_engine_agreement.py: each plan within 10%
