"""Hardware co-design from a sweep: the DMA-assignment and critical-condition columns of a
plan, and the summary of a sweep over the DMA engine count (``--dma-engines 1,2,4,8``).

The critical condition is the source document's ``T_comm <= T_compute`` (section 2): a
communication can be hidden only if the compute it can run beside lasts at least as long.
:func:`critical_columns` takes it from :func:`costmodel.engines.graph.explain.explain`, the rows of
``planner explain`` (one formula: ``T_comm`` per strategy, the compute window independent of its
transfers, ``critical_condition``), and names the strategy with the largest ratio: the plan
meets the condition when that one does.

:func:`dma_series` groups a sweep's records into problems (every input but ``dma_engines``)
swept over the engine count; :func:`format_dma_summary` prints, per engine count, the best plan's
step time, chunks and DMA assignment and whether ``T_comm <= T_compute`` holds, and names the
engine count from which it holds. ``step s`` is the analytical model's step time (``analytic_step_time_s``), which the
search optimises; ``graph s`` the same plan's under the op-graph scheduler.

>>> recs = [{"model": "m", "cluster": "c", "gpus": 8, "global_batch": 8, "seq": 1024, "dtype": "bf16",
...          "dma_engines": n, "status": "ok", "step_time_s": 1.0 + 1 / n, "chunks": 4, "tp": 8, "pp": 1,
...          "dp": 1, "cp": 1, "ep": 1, "dma_assignment": f"tp:cdma*{n}", "critical_strategy": "sp",
...          "t_comm_s": 0.5 / n, "t_compute_s": 0.2, "critical_holds": 0.5 / n <= 0.2} for n in (1, 2, 4)]
>>> [s.holds_from for s in dma_series(recs)]
[4]
>>> print(format_dma_summary(dma_series(recs)).splitlines()[-1])
T_comm <= T_compute holds from 4 DMA engines on (binding below that: sp, 250.0 ms vs 200.0 ms at 2 engines)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload

from ..report import table
from .grid import AXES_COLUMNS

#: the columns :func:`critical_columns` fills (schema version 3)
COLUMNS = ("dma_assignment", "critical_strategy", "t_comm_s", "t_compute_s", "critical_holds")


def critical_columns(model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig) -> dict:
    """The DMA assignment of a plan and its critical condition (see the module docstring).

    A serving workload has no assignment and no explain rows of a training step: every column
    is ``None``.

    >>> from costmodel.spec.presets import load_cluster, load_model
    >>> cl = load_cluster("sg2262-like").with_gpus(16)
    >>> c = critical_columns(load_model("llama3-8b"), cl, Workload(global_batch=16, seq_len=4096),
    ...                      ParallelConfig(tp=8, dp=2, sp=True, zero=1))
    >>> c["dma_assignment"], c["critical_strategy"], c["critical_holds"] == (c["t_comm_s"] <= c["t_compute_s"])
    ('tp:cdma*2,dp:cdma*1,zero:cdma*1', 'sp', True)
    """
    from costmodel.engines.graph.explain import explain

    from ..report import dma_assignment_json

    out = dict.fromkeys(COLUMNS)
    if workload.mode != "train":
        return out
    out["dma_assignment"] = dma_assignment_json(model, cluster, workload, config)["text"]
    rows = explain(model, cluster, workload, config)
    if not rows:  # no communication: nothing to hide
        out.update(t_comm_s=0.0, critical_holds=True)
        return out
    worst = max(rows, key=lambda r: r["ratio"])
    out.update(
        critical_strategy=worst["strategy"],
        t_comm_s=worst["t_comm_s"],
        t_compute_s=worst["t_compute_s"],
        critical_holds=bool(worst["critical_condition"]),
    )
    return out


# --------------------------------------------------------------------------- summary
@dataclass
class DmaSeries:
    """One problem of a sweep over the DMA engine count: its records by engine count.

    ``holds_from``: the smallest swept engine count from which ``T_comm <= T_compute`` holds at
    every larger count swept (None: not at the largest); ``holds_at``: the counts where it holds.
    """

    problem: dict
    records: list = field(default_factory=list)

    @property
    def engines(self) -> list:
        return [r["dma_engines"] for r in self.records]

    @property
    def holds_at(self) -> list:
        return [r["dma_engines"] for r in self.records if _holds(r)]

    @property
    def holds_from(self):
        first = None
        for r in reversed(self.records):
            if not _holds(r):
                break
            first = r["dma_engines"]
        return first

    def label(self) -> str:
        p = self.problem
        return (
            f"{p['model']} on {p['gpus']} x {p['cluster']}, batch {p['global_batch']} x {p['seq']} tokens, "
            f"{p['dtype']}"
            + "".join(f", {k}={p[k]:g}" for k in ("nvlink_gbps", "nic_gbps", "hbm_gib") if p.get(k) is not None)
        )

    def to_dict(self) -> dict:
        keep = (
            "dma_engines",
            "status",
            "step_time_s",
            "graph_step_time_s",
            "analytic_step_time_s",
            "chunks",
            "tp",
            "pp",
            "dp",
            "cp",
            "ep",
            "vp",
            "mb",
            "zero",
            "sp",
            "dma_assignment",
            "critical_strategy",
            "t_comm_s",
            "t_compute_s",
            "critical_holds",
        )
        return {
            "problem": dict(self.problem),
            "holds_from": self.holds_from,
            "holds_at": self.holds_at,
            "rows": [{k: r.get(k) for k in keep} for r in self.records],
        }


def _holds(rec: dict) -> bool:
    return rec.get("status") == "ok" and rec.get("critical_holds") is True


def dma_series(records: list[dict]) -> list[DmaSeries]:
    """The problems of ``records`` swept over two or more DMA engine counts, in first-seen order,
    each with its records sorted by engine count."""
    groups: dict = defaultdict(dict)
    for r in records:
        if r.get("dma_engines") is None:
            continue
        key = tuple(r.get(k) for k in AXES_COLUMNS if k != "dma_engines")
        groups[key][r["dma_engines"]] = r
    out = []
    for key, by_n in groups.items():
        if len(by_n) < 2:
            continue
        problem = dict(zip([k for k in AXES_COLUMNS if k != "dma_engines"], key))
        out.append(DmaSeries(problem, [by_n[n] for n in sorted(by_n)]))
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def _engines(n) -> str:
    return f"{n} engine" + ("" if n == 1 else "s")


def _plan(r: dict) -> str:
    if r.get("status") != "ok":
        return r.get("status") or "-"
    parts = [
        f"{k}{r[k]}" + (" sp" if k == "tp" and r.get("sp") else "")
        for k in ("tp", "pp", "dp", "cp", "ep")
        if r.get(k) and (r[k] > 1 or k in ("tp", "dp"))
    ]
    if (r.get("vp") or 1) > 1:
        parts.append(f"v{r['vp']}")
    parts += [f"mb{r['mb']}", f"z{r['zero']}"] if r.get("mb") else []
    return " ".join(parts)


def _verdict(s: DmaSeries) -> str:
    n = s.holds_from
    if n is None:
        last = s.records[-1]
        why = (
            f" (binding at {_engines(last['dma_engines'])}: {last['critical_strategy']}, "
            f"{_ms(last.get('t_comm_s'))} ms vs {_ms(last.get('t_compute_s'))} ms)"
            if last.get("critical_strategy")
            else ""
        )
        return f"T_comm <= T_compute holds at none of the engine counts swept{why}"
    i = s.engines.index(n)
    if i == 0:
        return f"T_comm <= T_compute holds at every engine count swept (from {n} on)"
    below = s.records[i - 1]
    why = (
        f" (binding below that: {below['critical_strategy']}, {_ms(below.get('t_comm_s'))} ms vs "
        f"{_ms(below.get('t_compute_s'))} ms at {_engines(below['dma_engines'])})"
        if below.get("critical_strategy")
        else ""
    )
    return f"T_comm <= T_compute holds from {n} DMA engines on{why}"


def format_dma_summary(series: list[DmaSeries]) -> str:
    """Per problem: a table by engine count and the line naming where the critical condition
    starts to hold (see the module docstring)."""
    blocks = []
    headers = [
        "engines",
        "step s",
        "graph s",
        "plan",
        "chunks",
        "dma_assignment",
        "binding",
        "T_comm ms",
        "T_compute ms",
        "T_comm<=T_compute",
    ]
    for s in series:
        rows = []
        for r in s.records:
            ok = r.get("status") == "ok"
            holds = r.get("critical_holds")
            rows.append(
                [
                    r["dma_engines"],
                    f"{r['analytic_step_time_s']:.4f}" if ok and r.get("analytic_step_time_s") else "-",
                    f"{r['graph_step_time_s']:.4f}" if ok and r.get("graph_step_time_s") else "-",
                    _plan(r),
                    r.get("chunks") if ok and r.get("chunks") is not None else "-",
                    r.get("dma_assignment") or "-",
                    r.get("critical_strategy") or "-",
                    _ms(r.get("t_comm_s")),
                    _ms(r.get("t_compute_s")),
                    "-" if holds is None or not ok else str(holds).lower(),
                ]
            )
        blocks.append("\n".join([f"DMA engines: {s.label()}", table(headers, rows), _verdict(s)]))
    return "\n\n".join(blocks)
