"""Framework mechanics on their own: what each framework issues vs what the cost model charges.

    python -m benchmarks.component_mechanics [--check] [--no-graph]

For a few representative plans per framework, :mod:`mechanics_rules` computes from the rules read
from the frameworks' code (``benchmarks/data/components/framework_mechanics.csv``, path@commit
and line per rule) the data-parallel collectives the framework issues: how many per step or per
micro-batch, of which kind, how many bytes, overlapped or not. The cost model's side is read from
what it charges: the op graph's nodes (``zero.*`` nodes of :func:`costmodel.engines.graph.builders.layer_graph`,
the ``dp.bucket*`` nodes of :func:`costmodel.engines.graph.dp.dp_bucket_graph` as the graph engine builds
them for the plan) and the analytic engine's bucket count (:func:`costmodel.compose.stage_terms.stage_dp_terms`).
Each quantity prints ``framework``, ``model`` and ``ok``/``MISMATCH``; latency rows show what the
difference costs (the alpha terms of :func:`costmodel.physics.comm.collectives.collective_latency_s`), for
information. ``--check`` exits 1 if any compared quantity mismatches, and lists them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from unittest import mock

from benchmarks import results_io
from benchmarks import mechanics_rules as mr
from costmodel.frameworks import rules as frameworks
from costmodel.compose.stage_terms import grad_bytes, stage_dp_terms
from costmodel.physics.mechanics.fsdp_copies import zero3_groups
from costmodel.physics.comm.collectives import collective_latency_s
from costmodel.physics.comm.groups import group_stride
from costmodel.spec.plan import ParallelConfig
from costmodel.engines.graph import compose
from costmodel.engines.graph.builders import layer_graph
from costmodel.engines.graph.dp import dp_bucket_graph
from costmodel.spec.units import WEIGHT_BYTES
from costmodel.physics.memory.stage_memory import grad_elem_bytes
from costmodel.physics.memory.stage_contents import expert_dp, layer_counts
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.physics.mechanics.zero3_edges import edge_collectives
from planner.emit import deepspeed_config

MS = 1e-3
REL = 0.01  # bytes agree within 1% (the model's norms and rounding of the tensor split)


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    model: str
    cluster: str
    config: dict
    global_batch: int = 512
    seq: int = 4096
    layout: str = "fused"  # parameter tensors as the framework's model code builds them (mechanics_rules)
    graph: bool = True  # also read the graph engine's DP buckets (graph_step; seconds per case)


def megatron_bucket_bytes(c_kwargs: dict) -> float:
    """The plan states Megatron-Core's own default bucket (rule 1-2) in gradient bytes, as
    ``planner --emit`` would pin it with ``--ddp-bucket-size``."""
    dp, cp = c_kwargs.get("dp", 1), c_kwargs.get("cp", 1)
    return max(40e6, 1e6 * dp * cp) * 4


CASES = (
    Case(
        name="megatron DDP, overlap, dp32",
        model="gpt-1.7b",
        cluster="a100-80g",
        config=dict(tp=1, pp=1, dp=32, mb=4, zero=0, bucket_bytes=megatron_bucket_bytes({"dp": 32})),
    ),
    Case(
        name="megatron DDP, no overlap, dp32",
        model="gpt-1.7b",
        cluster="a100-80g",
        config=dict(tp=1, pp=1, dp=32, mb=4, zero=0, bucket_bytes=0),
    ),
    Case(
        name="megatron distopt, overlap, tp4 dp48",
        model="mcore-gpt-16b",
        cluster="h100-sxm",
        config=dict(tp=4, pp=1, dp=48, mb=1, zero=1, sp=True, bucket_bytes=megatron_bucket_bytes({"dp": 48})),
    ),
    Case(
        name="megatron distopt, overlap, tp8 pp2 vp2 dp48",
        model="mcore-gpt-70b",
        cluster="h100-sxm",
        config=dict(tp=8, pp=2, vp=2, dp=48, mb=1, zero=1, sp=True, bucket_bytes=megatron_bucket_bytes({"dp": 48})),
        graph=False,
    ),
    Case(
        name="megatron distopt, overlap, MoE ep8 dp8",
        model="mixtral-8x7b",
        cluster="h100-sxm",
        config=dict(tp=1, pp=1, dp=8, ep=8, mb=1, zero=1, bucket_bytes=megatron_bucket_bytes({"dp": 8})),
        graph=False,
    ),
    Case(
        name="deepspeed ZeRO-3, Megatron-DeepSpeed Llama, dp384, DeepSpeed's buckets",
        model="llama2-70b",
        cluster="a100-80g",
        config=dict(tp=1, pp=1, dp=384, mb=1, zero=3, framework="deepspeed", bucket_bytes=0),
        graph=False,
    ),
    Case(
        name="deepspeed ZeRO-3, HF Llama, dp1536",
        model="llama2-70b",
        cluster="a100-80g",
        layout="hf",
        config=dict(tp=1, pp=1, dp=1536, mb=1, zero=3, framework="deepspeed", bucket_bytes=1e9),
        graph=False,
    ),
    Case(
        name="deepspeed ZeRO-3, Megatron-DeepSpeed GPT, dp1024",
        model="gpt3-175b",
        cluster="a100-80g",
        config=dict(tp=1, pp=1, dp=1024, mb=1, zero=3, framework="deepspeed", bucket_bytes=1e9),
        graph=False,
    ),
    Case(
        name="deepspeed pipeline ZeRO-1, tp8 pp35 dp8",
        model="gpt-530b",
        cluster="a100-80g",
        config=dict(tp=8, pp=35, dp=8, mb=1, zero=1, framework="deepspeed", bucket_bytes=0),
        graph=False,
    ),
    Case(
        name="fsdp2 reshard, dp64",
        model="llama3-8b",
        cluster="h100-sxm",
        layout="hf",
        config=dict(tp=1, pp=1, dp=64, mb=1, zero=3, framework="fsdp2", bucket_bytes=100e6),
        graph=False,
    ),
)


@dataclass(frozen=True)
class Check:
    case: str
    quantity: str
    framework: object
    model: object
    compared: bool = True  # False: information (what a difference costs)

    @property
    def ok(self) -> bool:
        if not self.compared:
            return True
        f, m = self.framework, self.model
        if isinstance(f, float) or isinstance(m, float):
            return abs(float(f) - float(m)) <= REL * max(abs(float(f)), abs(float(m)), 1e-30)
        return f == m


def _setup(case: Case):
    model, cluster = load_model(case.model), load_cluster(case.cluster)
    # the plan states the model code's module layout (ParallelConfig.module_layout); Megatron builds its own
    layout = {} if case.config.get("framework", "megatron") == "megatron" else {"module_layout": case.layout}
    c = ParallelConfig(**case.config, **layout)
    cluster = cluster.with_gpus(c.gpus)
    return model, cluster, Workload(global_batch=case.global_batch, seq_len=case.seq), c


def graph_dp_buckets(model, cluster, w, c) -> dict:
    """``{stage: number of dp.bucket nodes}`` the graph engine builds for the plan (its
    ``dp_tail`` calls recorded while :func:`costmodel.engines.graph.compose.graph_step` runs)."""
    seen = {}
    real = compose.dp_tail

    def spy(cl, window, t_grad_s, bucket_bytes, kind, size, stride, dma=None, buckets=None):
        g = dp_bucket_graph(cl, window, t_grad_s, bucket_bytes, kind, size, stride, dma, buckets)
        seen[len(seen)] = sum(1 for n in g if g.nodes[n].get("strategy") == "dp")
        return real(cl, window, t_grad_s, bucket_bytes, kind, size, stride, dma, buckets)

    compose._graph_step.cache_clear()
    with mock.patch.object(compose, "dp_tail", spy):
        compose._graph_step(model, cluster, w, c)
    compose._graph_step.cache_clear()
    return seen


def megatron_checks(rules, case: Case) -> list[Check]:
    model, cluster, w, c = _setup(case)
    sem = frameworks.of(c)
    out = [
        Check(case.name, "gradient collective", mr.megatron_grad_kind(c), sem.step_grad),
        Check(case.name, "parameter all-gather after the step", c.zero >= 1, sem.step_param_gather),
    ]
    graph = graph_dp_buckets(model, cluster, w, c) if case.graph else {}
    size = c.dp * c.cp
    # the stages whose DP tail the graph engine schedules, in stage order (the spy's record order)
    tails = [s for s in range(c.pp) if stage_dp_terms(model, cluster, c, s)[0] > 0]
    for s in sorted({0, c.pp - 1}):
        fw = mr.megatron_dp_buckets(rules, model, c, s)
        # a buffer whose group has one rank (expert DP = 1) issues no collective
        reduced = [b for b, n in ((fw["dense"], c.dp * c.cp), (fw["expert"], expert_dp(c))) if b and n > 1]
        n_fw = sum(len(b) for b in reduced)
        *_, buckets, pieces = stage_dp_terms(model, cluster, c, s)
        n_model = int(buckets)
        out.append(Check(case.name, f"stage {s}: gradient buckets (analytic)", n_fw, n_model))
        if s in tails and tails.index(s) in graph:
            out.append(Check(case.name, f"stage {s}: gradient buckets (graph)", n_fw, graph[tails.index(s)]))
        # rules 4-5, 10: buckets issued as they fill only on pp rank 0, chunk 0, with --overlap-grad-reduce
        overlap = c.bucket_bytes > 0
        fw_first = overlap and mr.megatron_bucketed(rules, s, 0)
        out.append(
            Check(
                case.name,
                f"stage {s}: chunk 0 reduced bucket by bucket during backward",
                fw_first,
                bool(pieces is not None and pieces[0] > 1),
            )
        )
        if c.vp > 1:
            fw_rest = overlap and mr.megatron_bucketed(rules, s, 1)
            out.append(
                Check(
                    case.name,
                    f"stage {s}: later chunks reduced bucket by bucket",
                    fw_rest,
                    bool(pieces is not None and pieces[1] > 1),
                )
            )
        fw_bytes = (sum(fw["dense"]) + sum(fw["expert"])) * grad_elem_bytes(c)  # the buffers, reduced or not
        out.append(Check(case.name, f"stage {s}: gradient bytes", fw_bytes, float(grad_bytes(model, c, s))))
        lat = collective_latency_s(sem.step_grad, size, group_stride("dpcp", c.tp, c.cp, c.dp), cluster)
        out.append(
            Check(
                case.name,
                f"stage {s}: gradient latency ms (alpha x buckets)",
                round(n_fw * lat / MS, 2),
                round(n_model * lat / MS, 2),
                compared=False,
            )
        )
    return out


def _zero_nodes(model, cluster, w, c, moe: bool, phase: str) -> dict:
    g = layer_graph(model, cluster, w, c, moe, phase)
    out: dict = {}
    for n in g:
        a = g.nodes[n]
        if a.get("strategy") == "zero":
            cnt, byt = out.get(a["kind"], (0, 0.0))
            out[a["kind"]] = (cnt + 1, byt + a["bytes"])
    return out


def zero3_checks(rules, case: Case) -> list[Check]:
    model, cluster, w, c = _setup(case)
    moe = model.is_moe
    dense, _expert = mr.layer_tensors(model, c, moe, case.layout)
    n_dense, n_moe = layer_counts(model, c, 0)
    layers = n_dense + n_moe
    # the buckets DeepSpeed runs with the configuration the planner emits for the plan (defaults where unset)
    zc = deepspeed_config(c, case.global_batch)["zero_optimization"]
    fetch = mr.zero3_fetches(rules, dense, zc.get("stage3_prefetch_bucket_size"))
    fwd, bwd = _zero_nodes(model, cluster, w, c, moe, "fwd"), _zero_nodes(model, cluster, w, c, moe, "bwd")
    params, size, stride = zero3_groups(model, c, moe)[0]
    lat_ag = collective_latency_s("allgather", size, stride, cluster)
    lat_rs = collective_latency_s("reducescatter", size, stride, cluster)
    stage_tensors = [t for ch in mr.stage_chunks(model, c, 0, case.layout) for t in ch[0]]
    rs_fw = mr.zero3_reduce_buckets(rules, stage_tensors, zc.get("reduce_bucket_size"))
    ag_m, rs_m = fwd.get("allgather", (0, 0.0)), bwd.get("reducescatter", (0, 0.0))
    edge = edge_collectives(model, c, 0)  # the embedding/head buckets the step charges (pp 1: both on stage 0)
    out = [
        Check(case.name, "all-gathers per layer, forward", len(fetch), ag_m[0]),
        Check(case.name, "all-gathers per layer, backward", len(fetch), bwd.get("allgather", (0, 0.0))[0]),
        Check(case.name, "gathered bytes per layer", sum(fetch) * WEIGHT_BYTES, ag_m[1]),
        Check(case.name, "reduce-scatters per micro-batch (stage)", len(rs_fw), rs_m[0] * layers + len(edge.reduces)),
        Check(
            case.name,
            "reduce-scattered bytes per micro-batch",
            sum(rs_fw) * grad_elem_bytes(c),
            rs_m[1] * layers + sum(edge.reduces) * grad_elem_bytes(c),
            compared=False,
        ),
    ]
    fw_lat = 2 * layers * len(fetch) * lat_ag + len(rs_fw) * lat_rs
    m_lat = 2 * layers * ag_m[0] * lat_ag + (layers * rs_m[0] + len(edge.reduces)) * lat_rs
    out.append(
        Check(
            case.name,
            "ZeRO latency ms per micro-batch (alpha x count)",
            round(fw_lat / MS, 1),
            round(m_lat / MS, 1),
            compared=False,
        )
    )
    return out


def fsdp2_checks(rules, case: Case) -> list[Check]:
    """torchtitan (rules 32-34): one unit per block, the embedding its own unit (resharded after
    forward), ``[norm, lm_head]`` one unit kept unsharded from forward to backward."""
    model, cluster, w, c = _setup(case)
    dense, _ = mr.layer_tensors(model, c, False, case.layout)
    layers = sum(layer_counts(model, c, 0))
    reshard = c.zero == 3
    fwd, bwd = _zero_nodes(model, cluster, w, c, False, "fwd"), _zero_nodes(model, cluster, w, c, False, "bwd")
    edge = edge_collectives(model, c, 0)  # the embedding/head units the step charges (pp 1: both on stage 0)
    emb = model.embedding_params / c.tp
    head = 0.0 if model.tied_embeddings else emb + model.hidden
    ag_fwd_fw = layers + 1 + (head > 0)
    ag_bwd_fw = (layers + 1) if reshard else 0
    gathered_fw = (layers * sum(dense) + emb + head) * WEIGHT_BYTES
    return [
        Check(
            case.name,
            "all-gathers per micro-batch, forward",
            ag_fwd_fw,
            layers * fwd.get("allgather", (0, 0))[0] + len(edge.gathers_fwd),
        ),
        Check(
            case.name,
            "all-gathers per micro-batch, backward",
            ag_bwd_fw,
            layers * bwd.get("allgather", (0, 0))[0] + len(edge.gathers_bwd),
        ),
        Check(
            case.name,
            "reduce-scatters per micro-batch",
            ag_fwd_fw,
            layers * bwd.get("reducescatter", (0, 0))[0] + len(edge.reduces),
        ),
        Check(
            case.name,
            "forward gathered bytes per micro-batch",
            gathered_fw,
            layers * fwd.get("allgather", (0, 0.0))[1] + sum(edge.gathers_fwd) * WEIGHT_BYTES,
        ),
    ]


def pipe_checks(rules, case: Case) -> list[Check]:
    """DeepSpeed's pipeline engine (rules 28-31, 35-38) with the configuration the planner emits:
    gradients reduced once per step after the last backward, never overlapped; blocking p2p. The
    emitted JSON sets no ``data_types``, so a BF16 run accumulates BF16 gradients (rule 35) and
    ZeRO-1 runs the ZeRO optimizer (rule 36): it reduces in ``reduce_bucket_size`` buckets over the
    parameters in forward order (rule 37), each bucket copied into a buffer of the communication
    dtype (rule 38: the stated ``communication_data_type``, else the half dtype the run trains in)."""
    model, cluster, w, c = _setup(case)
    sem = frameworks.of(c)
    cfg = deepspeed_config(c, case.global_batch)
    fp32_accum = cfg.get("data_types", {}).get("grad_accum_dtype") == "fp32"
    half = cfg["bf16"]["enabled"] or cfg["fp16"]["enabled"]
    bf16_opt = cfg["bf16"]["enabled"] and fp32_accum and c.zero == 1  # rule 36
    kind = "allreduce" if (bf16_opt or c.zero == 0) else "reducescatter"
    comm = cfg.get("communication_data_type") or ("fp16" if cfg["fp16"]["enabled"] else "bf16" if half else "fp32")
    elem = 4 if comm == "fp32" else 2
    zc = cfg["zero_optimization"]
    bucket = (
        mr.rule(rules, "deepspeed", "grad_reduce_buffer")
        if kind == "allreduce"
        else zc.get("reduce_bucket_size", mr.rule(rules, "deepspeed", "reduce_bucket_size"))
    )
    out = [
        Check(
            case.name,
            "ZeRO stages accepted with pp>1",
            tuple(z for z in range(4) if z <= 1),
            frameworks.zero_stages("deepspeed", pp=c.pp),
        ),
        Check(case.name, "gradient collective", kind, sem.step_grad),
        Check(case.name, "gradient element bytes on the wire", elem, grad_elem_bytes(c)),
    ]
    for s in sorted({0, c.pp - 1}):
        tensors = [t for ch in mr.stage_chunks(model, c, s) for t in ch[0] + ch[1]]
        n_fw = len(mr.close_gt(tensors, bucket))  # forward order (rule 37)
        *_, buckets, pieces = stage_dp_terms(model, cluster, c, s)
        out.append(Check(case.name, f"stage {s}: gradient collectives", n_fw, int(buckets)))
        out.append(
            Check(
                case.name,
                f"stage {s}: gradient reduce overlapped with backward",
                False,
                bool(pieces is not None and pieces[0] > 0),
            )
        )
    out.append(
        Check(case.name, "interleaved schedule allowed", False, frameworks.allows("deepspeed", "vp", 2, pp=c.pp))
    )
    return out


def evaluate(cases=CASES, graph: bool = True) -> list[Check]:
    rules = mr.load_rules()
    out = []
    for case in cases:
        fw, pp = case.config.get("framework", "megatron"), case.config.get("pp", 1)
        if not graph and case.graph:
            case = Case(**{**case.__dict__, "graph": False})
        if fw == "megatron":
            out += megatron_checks(rules, case)
        elif fw == "deepspeed" and pp > 1:
            out += pipe_checks(rules, case)
        elif fw == "deepspeed":
            out += zero3_checks(rules, case)
        else:
            out += fsdp2_checks(rules, case)
    return out


def zero3_scaling(dps=(384, 768, 1536), per_module: bool = True) -> list[tuple[int, float]]:
    """Step seconds (analytic engine) of DeepSpeed ZeRO-3 Llama-2-70B on A100-80G, 1,536 sequences
    of 2,048 tokens, one micro-batch per GPU-group, as ``dp`` doubles (strong scaling). With
    ``per_module=False`` the gathers and reduces are charged one per layer, as the cost model did
    before :mod:`costmodel.physics.mechanics.zero3_fetch`."""
    from costmodel.engines import analytic
    from costmodel.training import estimate
    from costmodel.physics.memory.stage_contents import layer_params

    model, cluster = load_model("llama2-70b"), load_cluster("a100-80g")
    w = Workload(global_batch=1536, seq_len=2048)

    def one(m, c, moe):
        d, e = layer_params(m, c, moe)
        return [d], [e]

    out = []
    for dp in dps:
        c = ParallelConfig(dp=dp, mb=1536 // dp, zero=3, framework="deepspeed", bucket_bytes=0)
        analytic.layer_timing.cache_clear()
        analytic._layer_base.cache_clear()  # the DP-independent part, memoised apart
        if per_module:
            est = estimate.evaluate(model, cluster.with_gpus(dp), w, c, engine="analytic")
        else:
            with mock.patch.object(analytic, "gather_pieces", one), mock.patch.object(analytic, "reduce_pieces", one):
                est = estimate.evaluate(model, cluster.with_gpus(dp), w, c, engine="analytic")
        analytic.layer_timing.cache_clear()
        analytic._layer_base.cache_clear()  # the DP-independent part, memoised apart
        out.append((dp, est.step_time_s))
    return out


def main(argv=None, record_results: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if any compared quantity mismatches")
    ap.add_argument("--no-graph", action="store_true", help="skip the graph engine's DP bucket count")
    ap.add_argument("--scaling", action="store_true", help="also print DeepSpeed ZeRO-3 step time as DP doubles")
    args = ap.parse_args(argv)
    if args.scaling:
        print("DeepSpeed ZeRO-3 Llama-2-70B, A100-80G, 1,536 x 2,048 tokens: step seconds (analytic)")
        for (dp, t_mod), (_, t_one) in zip(zero3_scaling(), zero3_scaling(per_module=False)):
            print(f"  dp {dp:>5}: per-module gathers {t_mod:8.2f}   one gather per layer {t_one:8.2f}")
    checks = evaluate(graph=not args.no_graph)
    case = None
    for k in checks:
        if k.case != case:
            case = k.case
            print(f"\n{case}")
        tag = "info" if not k.compared else ("ok" if k.ok else "MISMATCH")
        f = f"{k.framework:.4g}" if isinstance(k.framework, float) else str(k.framework)
        m = f"{k.model:.4g}" if isinstance(k.model, float) else str(k.model)
        print(f"  {k.quantity:<50} framework {f:>12}  model {m:>12}  {tag}")
    bad = [k for k in checks if not k.ok]
    n = sum(1 for k in checks if k.compared)
    print(f"\n{n - len(bad)} of {n} compared quantities match; {len(bad)} mismatch")
    by_case: dict[str, list] = {}
    for k in checks:
        if k.compared:
            by_case.setdefault(str(k.case), []).append(k.ok)
    results_io.record(
        "component_mechanics",
        argv,
        enabled=record_results and not args.no_graph,
        title="what each framework issues (rules read from its code) against what the model charges",
        headline={"compared": n, "matching": n - len(bad), "mismatches": len(bad)},
        targets=[{"name": "every compared quantity matches", "met": not bad}],
        table=[{"case": c, "compared": len(oks), "matching": sum(oks)} for c, oks in by_case.items()],
        inputs=[
            "costmodel",
            "benchmarks/component_mechanics.py",
            "benchmarks/mechanics_rules.py",
            "benchmarks/data/components/framework_mechanics.csv",
        ],
    )
    if args.check and bad:
        for k in bad:
            print(f"mismatch: {k.case}: {k.quantity}: framework {k.framework}, model {k.model}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(record_results=True))
