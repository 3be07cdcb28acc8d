"""How each component of a training prediction is known: measured, interpolated, extrapolated, fitted or assumed.

Issue 38 asks that every number carry its evidence. A step time is composed of kernel classes (GEMM,
attention, element-wise), collectives per parallel group, the optimizer step, the pipeline bubble and the
memory that decides whether it fits. Each rests on constants of the cluster spec, and each constant is known
one of five ways (:data:`KINDS`), read from ``costmodel/trust/data/constant_evidence.json`` (taken from every
preset's ``assumptions``; a cluster file of the user's own gets ``assumed`` for the constants it sets, and
``planner calibrate`` marks what it fitted). Derived figures inherit the evidence of their inputs: the bubble
is stage compute times arranged by the schedule, so it is known as well as the compute is.

The band widens with it (:func:`widening_log_sd`): a component whose constant no measured run of its device
has exercised (``untested``: carried over from another generation, or a placeholder) adds
``share x`` :data:`UNTESTED_LOG_SD` in quadrature, where ``share`` is its fraction of the step. The residual
band of :mod:`costmodel.trust.uncertainty` already holds the errors of constants the runs did exercise, so
those add nothing (counting them twice would widen every band for errors already measured).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from costmodel.physics.comm.groups import group_stride, layout
from costmodel.physics.kernels.compute import cp_exchange, layer_ops
from costmodel.physics.comm.collectives import collective_evidence
from costmodel.frameworks.stacks import tp_from_nccl_tables
from costmodel.physics.comm.ep_dispatch import HIERARCHICAL, ep_alltoall_bytes
from costmodel.physics.kernels.gemm import ACT_BYTES
from costmodel.physics.kernels.measured import table_system
from costmodel.physics.tables import KINDS  # the kinds, strongest first: a component is as weak as its weakest part
from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_cluster
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload


#: log-sd of a constant carried to a device no measured run has tested: ln(0.71 / 0.53) = 0.29, how far the
#: in-training GEMM efficiency moved from A100 to Hopper (a100-80g and h100-sxm presets, both fitted to
#: step times) -- the error a carried-over constant has shown before (assumption: the next generation moves
#: as far)
UNTESTED_LOG_SD = math.log(0.71 / 0.53)

#: parts under this share of their component do not decide its kind
MINOR_SHARE = 0.05

_DATA = Path(__file__).parent / "data" / "constant_evidence.json"


@dataclass(frozen=True)
class Known:
    """How one constant (or one component) is known: ``kind`` of :data:`KINDS`, ``basis`` in words, and
    ``untested``: no measured run of this device exercises it."""

    kind: str
    basis: str
    untested: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SpecError("evidence.kind", self.kind, f"one of {', '.join(KINDS)}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "basis": self.basis, "untested": self.untested}


@lru_cache(maxsize=1)
def _registry() -> dict:
    return json.loads(_DATA.read_text())


def _value(cluster: ClusterSpec, name: str):
    part, attr = name.split(".")
    return getattr(getattr(cluster, part), attr)


def constant_evidence(cluster: ClusterSpec, name: str) -> Known:
    """How the cluster constant ``name`` (``device.gemm_efficiency``, ``intra_link.efficiency``...) is known.

    >>> constant_evidence(load_cluster("h100-sxm"), "device.gemm_efficiency").kind
    'fitted'
    >>> constant_evidence(load_cluster("b200"), "device.gemm_efficiency").untested
    True
    """
    reg = _registry()
    if name.split(".")[-1] in cluster.calibrated_constants or name in cluster.calibrated_constants:
        return Known("fitted", f"{name.split('.')[-1]} fitted to the user's runs by planner calibrate")
    default = Known(*reg["default"].get(name, ["assumed", f"{name} of the cluster file", True]))
    presets = reg["presets"]
    if cluster.name not in presets:
        return default
    try:
        preset = load_cluster(cluster.name)
    except SpecError:
        return default
    if _value(preset, name) != _value(cluster, name):
        # changed by the stack (FlashAttention-2's rate, ...) or by the user: the preset's evidence no longer holds
        return Known("assumed", f"{name.split('.')[-1]} {_value(cluster, name):g} set by the stack or the user", False)
    entry = presets[cluster.name].get(name)
    return Known(*entry) if entry else default


def _weakest(parts: dict[str, tuple[float, Known]]) -> Known:
    """The kind of a component: the weakest of its parts that carry at least :data:`MINOR_SHARE` of it."""
    major = [k for share, k in parts.values() if share >= MINOR_SHARE] or [k for _, k in parts.values()]
    worst = max(major, key=lambda k: KINDS.index(k.kind))
    return Known(worst.kind, worst.basis, any(k.untested for k in major))


def compute_parts(model: ModelSpec, cluster: ClusterSpec, workload: Workload, config) -> dict[str, tuple[float, Known]]:
    """The compute of one layer split by kernel class: ``{class: (share of the layer's time, Known)}``."""
    dev = cluster.device
    ops = layer_ops(model, dev, workload, config, moe=model.is_moe)
    time = {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0, "tables": 0.0}
    table_kinds = set()
    for op in ops:
        key = "tables" if op.evidence else "elementwise" if op.kind not in time else op.kind
        time[key] += op.fwd_s + op.bwd_s
        table_kinds |= {op.evidence} if op.evidence else set()
    total = sum(time.values()) or 1.0
    gemm = constant_evidence(
        cluster, "device.fp8_gemm_efficiency" if workload.dtype == "fp8" else "device.gemm_efficiency"
    )
    recipe = _registry()["recipes"].get(f"gemm.{workload.recipe}")
    if recipe:  # the recipe's rate over FP8's is assumed (costmodel.physics.kernels.gemm.recipe_rate_factor)
        gemm = Known(recipe[0], f"{recipe[1]}; {gemm.basis}", recipe[2] or gemm.untested)
    parts = {}
    if dev.kernel_table and not table_kinds:
        gemm = Known(gemm.kind, f"no measured GEMM table for {dev.name}, the fitted model: {gemm.basis}", gemm.untested)
    if table_kinds:
        system, stand_in = table_system(dev)
        kind = max(table_kinds, key=KINDS.index)
        basis = f"single GEMMs from the measured {system} table ({dev.kernel_table}) at sustained clocks" + (
            f"; {stand_in}" if stand_in else ""
        )
        parts["gemm (tables)"] = (time["tables"] / total, Known(kind, basis))
    attn = (
        constant_evidence(cluster, "device.attention_efficiency")
        if config.flash_attention
        else constant_evidence(cluster, "device.gemm_efficiency")
    )
    ew = constant_evidence(cluster, "device.mem_bw_efficiency")
    return {
        **parts,
        "gemm": (time["gemm"] / total, gemm),
        "attention": (time["attention"] / total, attn),
        "elementwise": (time["elementwise"] / total, ew),
    }


#: the breakdown's collective components, the parallel dimension each runs over
_COMM = {"tp": "tp", "sp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dpcp", "zero": "dpcp"}


def _group_size(config, dim: str) -> int:
    return {"tp": config.tp, "cp": config.cp, "ep": config.ep, "pp": config.pp, "dpcp": config.dp * config.cp}[dim]


def _table_messages(
    model: ModelSpec | None, workload: Workload | None, config, dim: str, domain: int
) -> list[tuple[str, float]] | None:
    """The (kind, per-GPU bytes) of the collectives a layer issues over ``dim`` as the step model states them (tp:
    the activation all-reduce / all-gather / reduce-scatter of ``costmodel.engines.analytic``; ep: the AllToAll
    dispatcher's buffer, :func:`costmodel.physics.comm.ep_dispatch.ep_alltoall_bytes`; cp: PyTorch
    context_parallel's all-gather, :func:`costmodel.physics.kernels.compute.cp_exchange`); [] where the sizes are
    not stated here (dp, zero, or no model); None where no table times them (DeepEP / HybridEP kernels, CP's ring
    send/recv, pipeline sends)."""
    if dim == "pp" or (dim == "ep" and config.ep_dispatcher in HIERARCHICAL):
        return None
    if model is None or workload is None or dim not in ("tp", "ep", "cp"):
        return []
    n = config.mb * workload.seq_len / config.cp
    if dim == "tp":
        msg = n * model.hidden * ACT_BYTES
        return [("allreduce", msg), ("allgather", msg), ("reducescatter", msg)]
    if dim == "ep":
        return [("alltoall", ep_alltoall_bytes(model, n, config.tp, config.ep, domain, config.ep_dispatcher))]
    gather = cp_exchange(model, n, config.tp, config.cp, config.cp_impl).gather_bytes
    return [("allgather", gather)] if gather else None


def comm_known(
    cluster: ClusterSpec, config, group: str, model: ModelSpec | None = None, workload: Workload | None = None
) -> Known:
    """How the collectives of ``group`` are known: from the measured nccl-tests table where it times them
    (:func:`costmodel.physics.comm.collectives.collective_evidence`: the EP all-to-all, or any kind under
    ``--kernels measured``, the group inside one node and its size inside the table's counts; the weakest kind of the layer's messages where ``model`` and
    ``workload`` state them, else of a 1 MiB message), else the efficiency of the link they cross."""
    dim = _COMM[group]
    stride = group_stride(dim, config.tp, config.cp, config.dp, config.ep)
    size = _group_size(config, dim)
    if dim == "pp":
        scope = "inter" if stride >= cluster.domain else "intra"
    else:
        scope = layout(size, stride, cluster.domain).scope
    msgs = _table_messages(model, workload, config, dim, cluster.domain) if scope == "intra" else None
    if msgs is not None:
        # the EP all-to-all and NCCL-issued TP are tabled as the engines time them (ep_dispatch_time_s nccl_table=True,
        # collectives.tp_from_nccl_tables), the rest only under --kernels measured
        if dim == "ep":
            tables = True
        elif dim == "tp" and workload is not None:
            tables = tp_from_nccl_tables(workload, config)
        else:
            tables = None
        evs = [
            collective_evidence(kind, b, size, stride, cluster, tables) for kind, b in msgs or [("allgather", 1 << 20)]
        ]
        if all(ev is not None for ev in evs):
            worst = max(evs, key=lambda e: KINDS.index(e.kind))
            sized = "" if msgs else " (message sizes not checked)"
            note = f": {worst.note}" if worst.note else ""
            return Known(worst.kind, f"inside a node: the measured nccl-tests table {worst.table}{sized}{note}")
    k = constant_evidence(cluster, f"{scope}_link.efficiency")
    where = "inside a node (NVLink)" if scope == "intra" else "across nodes (network)"
    return Known(k.kind, f"{where}: {k.basis}", k.untested)


def step_evidence(model: ModelSpec, cluster: ClusterSpec, workload: Workload, est) -> dict:
    """Evidence per component of ``est.breakdown`` (and of the memory), JSON-ready, with each one's share."""
    config = est.config
    parts = compute_parts(model, cluster, workload, config)
    compute = _weakest(parts)
    t = est.step_time_s or 1.0
    out = {}
    for key, seconds in est.breakdown.items():
        share = max(0.0, seconds) / t
        if key == "compute_s":
            entry = {
                **compute.to_dict(),
                "parts": {p: {"share": round(s, 3), **kn.to_dict()} for p, (s, kn) in parts.items()},
            }
        elif key == "recompute_s":
            entry = {**compute.to_dict(), "basis": "as compute: the recomputed forward runs the same kernels"}
        elif key == "bubble_s":
            entry = {**compute.to_dict(), "basis": "derived: stage compute times arranged by the pipeline schedule"}
        elif key == "interference_s":
            entry = constant_evidence(cluster, "device.comm_compute_interference").to_dict()
        elif key == "optimizer_s":
            entry = constant_evidence(cluster, "device.mem_bw_efficiency").to_dict()
        elif key.removesuffix("_exposed_s") in _COMM:
            entry = comm_known(cluster, config, key.removesuffix("_exposed_s"), model, workload).to_dict()
        else:
            entry = Known("assumed", f"{key}: no evidence recorded").to_dict()
        out[key] = {**entry, "share": round(share, 3)}
    out["memory"] = Known(
        "assumed",
        "tensor sizes counted from the plan (exact for the modelled kernels) plus the allocator reserve "
        "(CUDA context, workspaces, 5% fragmentation: assumed); checked against the measured cases of "
        "benchmarks/data/components/memory.csv",
    ).to_dict()
    return out


def widening_log_sd(evidence: dict) -> float:
    """Log-sd the band gains from components whose constants no run of this device has tested (the module)."""
    terms = [e["share"] * UNTESTED_LOG_SD for e in evidence.values() if e.get("untested") and "share" in e]
    return math.sqrt(sum(x * x for x in terms))


def summary(evidence: dict) -> str:
    """One line: each kind with the components that rest on it, the untested ones named."""
    by_kind: dict[str, list[str]] = {}
    labels = {"compute_s": "compute", "optimizer_s": "optimizer", "interference_s": "interference"}
    for key, e in evidence.items():
        if key in ("recompute_s", "bubble_s") or (e.get("share", 1.0) == 0 and key != "memory"):
            continue
        label = labels.get(key, key.removesuffix("_exposed_s") + (" comm" if key.endswith("_exposed_s") else ""))
        if key == "compute_s":
            for p, d in e["parts"].items():
                if d["share"] >= MINOR_SHARE:
                    by_kind.setdefault(d["kind"], []).append(p + ("*" if d["untested"] else ""))
            continue
        by_kind.setdefault(e["kind"], []).append(label + ("*" if e.get("untested") else ""))
    text = "; ".join(f"{k}: {', '.join(by_kind[k])}" for k in KINDS if k in by_kind)
    star = " (* untested on this device: the band is widened)" if "*" in text else ""
    return f"evidence: {text}{star}"
