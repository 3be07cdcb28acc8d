"""Plots of a sweep (matplotlib, PNG and SVG): scaling, best TP x PP, hardware co-design.

* :func:`plot_scaling`: MFU and step time against GPU count, one line per model (and per
  cluster, batch, sequence length or what-if when the sweep varies them).
* :func:`plot_tp_pp`: the best plan's ``TP x PP`` as a heatmap over model size x GPU count.
* :func:`plot_dma_engines` (a sweep with a ``dma_engines`` axis): the best plan's step time,
  chunks and DMA assignment against the engine count, and its binding ``T_comm`` against
  ``T_compute`` (:mod:`planner.sweep.codesign`; the same numbers as the sweep's text summary).
* :func:`plot_codesign`: for one problem and plan, each strategy's communication time
  ``T_comm`` against NVLink bandwidth, NIC bandwidth and DMA engine count, with the step's
  compute time ``T_compute``; a marker at the critical point ``T_comm <= T_compute`` (the
  source document's condition for hiding communication) and the exposed fraction ``1 - r``
  the overlap schedule leaves (:func:`codesign_curve` computes the numbers with
  :func:`costmodel.api.evaluate`).

matplotlib is an optional extra (``pip install 'overlap-planner[plot]'``).
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import GB

from ..report import count_text
from .grid import AXES_COLUMNS, Case, apply_whatifs
from .store import ResultStore

FORMATS = ("png", "svg")
#: what-if knobs of the co-design plot: (label, unit)
KNOBS = {
    "nvlink_gbps": ("NVLink bandwidth per GPU", "GB/s"),
    "nic_gbps": ("NIC bandwidth per GPU", "GB/s"),
    "dma_engines": ("DMA engines per class", "engines"),
}
#: bandwidth multipliers of the co-design sweep (1/16x to 8x the cluster's)
FACTORS = tuple(2 ** (k / 4) for k in range(-16, 13))
HIDDEN_R = 0.99  # overlap rate counted as fully hidden


def _figure(nrows: int = 1, ncols: int = 1, size=(6.4, 4.0)):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise SpecError("plots", "matplotlib", "installed first: pip install 'overlap-planner[plot]'") from None
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in FORMATS:
        p = out_dir / f"{stem}.{fmt}"
        fig.savefig(p, dpi=120)
        paths.append(p)
    return paths


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(text)).stem if "/" in str(text) else str(text))


def _name(text) -> str:
    """A model or cluster as a label: a spec file's name without its folders and suffix
    (``/data/cfg/llama-70b.json`` -> ``llama-70b``), a preset name as it is."""
    t = str(text)
    p = Path(t)
    return p.stem if ("/" in t or os.sep in t or p.suffix in (".json", ".yaml", ".yml")) else t


def _context(rec: dict, vary: list[str]) -> str:
    return " ".join(f"{k}={_name(rec[k]) if k in ('model', 'cluster') else rec[k]}" for k in vary)


def _varying(records: list[dict], keys) -> list[str]:
    return [k for k in keys if len({r.get(k) for r in records}) > 1]


# --------------------------------------------------------------------------- scaling
def plot_scaling(records: list[dict], out_dir: Path, stem: str = "scaling") -> list[Path]:
    """MFU (%) and step time (s) against GPU count, one line per model and context."""
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return []
    vary = _varying(ok, [k for k in AXES_COLUMNS if k not in ("model", "gpus")])
    lines = defaultdict(list)
    for r in ok:
        lines[(r["model_params"] or 0, r["model"], _context(r, vary))].append(r)
    fig, ax = _figure(1, 2)
    for (_, model, ctx), rs in sorted(lines.items()):
        rs.sort(key=lambda r: r["gpus"])
        label = (
            f"{_name(model)} ({count_text(rs[0]['model_params'])} params) {ctx}".strip()
            if rs[0]["model_params"]
            else f"{_name(model)} {ctx}".strip()
        )
        x = [r["gpus"] for r in rs]
        ax[0][0].plot(x, [100 * r["mfu"] for r in rs], marker="o", label=label)
        ax[0][1].plot(x, [r["step_time_s"] for r in rs], marker="o", label=label)
    for a, ylabel in ((ax[0][0], "MFU (%)"), (ax[0][1], "step time (s)")):
        a.set_xscale("log", base=2)
        a.set_xlabel("GPUs")
        a.set_ylabel(ylabel)
        a.grid(True, which="both", alpha=0.3)
    ax[0][1].set_yscale("log")
    ax[0][0].set_ylim(bottom=0)
    ax[0][0].legend(fontsize="small")
    fig.suptitle("best plan per case: MFU and step time vs GPU count")
    return _save(fig, out_dir, stem)


# --------------------------------------------------------------------------- TP x PP
def plot_tp_pp(records: list[dict], out_dir: Path, stem: str = "tp_pp") -> list[Path]:
    """Best ``TP x PP`` over model size (rows) x GPU count (columns); one panel per context."""
    if not records:
        return []
    vary = _varying(records, [k for k in AXES_COLUMNS if k not in ("model", "gpus")])
    panels = defaultdict(list)
    for r in records:
        panels[_context(r, vary)].append(r)
    keys = sorted(panels)[:6]
    fig, ax = _figure(len(keys), 1, size=(7.0, 0.5 + 0.45 * len({r["model"] for r in records})))
    for a, key in zip((row[0] for row in ax), keys):
        rs = panels[key]
        models = sorted({(r["model_params"] or 0, r["model"]) for r in rs})
        gpus = sorted({r["gpus"] for r in rs})
        cell = {(r["model"], r["gpus"]): r for r in rs}
        grid = [[math.nan] * len(gpus) for _ in models]
        for i, (_, m) in enumerate(models):
            for j, g in enumerate(gpus):
                r = cell.get((m, g))
                if r is None:
                    continue
                if r["status"] == "ok":
                    grid[i][j] = math.log2(r["tp"] * r["pp"])
                    text = f"{r['tp']}x{r['pp']}"
                else:
                    text = {"infeasible": "no fit", "error": "error", "crashed": "crash"}.get(r["status"], "?")
                a.text(j, i, text, ha="center", va="center", fontsize="small")
        im = a.imshow(grid, cmap="viridis", aspect="auto", vmin=0, alpha=0.8)
        a.set_xticks(range(len(gpus)), [str(g) for g in gpus])
        a.set_yticks(range(len(models)), [f"{_name(m)} ({p / 1e9:.0f}B)" if p else _name(m) for p, m in models])
        a.set_xlabel("GPUs")
        a.set_title(f"best TP x PP {key}".strip(), fontsize="medium")
        fig.colorbar(im, ax=a, label="log2(TP x PP)")
    return _save(fig, out_dir, stem)


# --------------------------------------------------------------------------- co-design
@dataclass(frozen=True)
class CodesignCurve:
    """Per-strategy communication against one hardware knob, for one plan.

    ``critical[s]``: the smallest knob value with ``T_comm <= T_compute`` (None: not within the
    range swept); ``hidden[s]``: the smallest with overlap rate ``r >= 0.99`` (None: never,
    e.g. TP without SP, whose AllReduce sits on the critical path).
    """

    knob: str
    unit: str
    values: list
    compute_s: list
    link_s: dict = field(default_factory=dict)
    exposed_s: dict = field(default_factory=dict)
    critical: dict = field(default_factory=dict)
    hidden: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "knob": self.knob,
            "unit": self.unit,
            "values": list(self.values),
            "compute_s": list(self.compute_s),
            "link_s": dict(self.link_s),
            "exposed_s": dict(self.exposed_s),
            "critical": dict(self.critical),
            "hidden": dict(self.hidden),
        }


def knob_values(cluster: ClusterSpec, knob: str) -> list:
    """The values swept for ``knob``: bandwidth 1/16x to 8x the cluster's, or 1 to 16 engines."""
    if knob == "nvlink_gbps":
        return [cluster.intra_link.bw_bytes_per_s / GB * f for f in FACTORS]
    if knob == "nic_gbps":
        return [cluster.inter_link.bw_bytes_per_s / GB * f for f in FACTORS]
    if knob == "dma_engines":
        return list(range(1, 17))
    raise SpecError("knob", knob, f"one of {', '.join(KNOBS)}")


def codesign_curve(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, config: ParallelConfig, knob: str, values=None
) -> CodesignCurve:
    """Evaluate ``config`` with ``knob`` set to each of ``values`` (default :func:`knob_values`).

    >>> from costmodel.spec.presets import load_cluster, load_model
    >>> cl = load_cluster("h100-sxm").with_gpus(64)
    >>> c = codesign_curve(load_model("llama3-70b"), cl, Workload(global_batch=128, seq_len=4096),
    ...                    ParallelConfig(tp=8, pp=4, dp=2, sp=True, zero=1, recompute="selective"), "nic_gbps")
    >>> c.critical["dp"] is not None and c.critical["dp"] < 50   # hideable below the 50 GB/s NIC
    True
    """
    values = list(values) if values is not None else knob_values(cluster, knob)
    compute, link, exposed = [], defaultdict(list), defaultdict(list)
    for v in values:
        e = evaluate(model, apply_whatifs(cluster, **{knob: v}), workload, config)
        compute.append(e.breakdown["compute_s"] + e.breakdown["recompute_s"])
        for s, t in e.comm_link_s.items():
            link[s].append(t)
            exposed[s].append(e.comm_exposed_s.get(s, 0.0))
    active = [s for s in link if max(link[s]) > 0]
    critical, hidden = {}, {}
    order = sorted(range(len(values)), key=lambda i: values[i])
    for s in active:
        critical[s] = next((values[i] for i in order if link[s][i] <= compute[i]), None)
        hidden[s] = next(
            (values[i] for i in order if link[s][i] > 0 and exposed[s][i] <= (1 - HIDDEN_R) * link[s][i]), None
        )
    label, unit = KNOBS[knob]
    return CodesignCurve(
        knob=knob,
        unit=unit,
        values=values,
        compute_s=compute,
        link_s={s: link[s] for s in active},
        exposed_s={s: exposed[s] for s in active},
        critical=critical,
        hidden=hidden,
    )


def plot_codesign(curves: list[CodesignCurve], out_dir: Path, stem: str, title: str = "") -> list[Path]:
    """One row per knob: ``T_comm`` per strategy vs ``T_compute`` (critical points marked), and
    the exposed fraction ``1 - r`` (points where the schedule hides it marked)."""
    curves = [c for c in curves if c.link_s]
    if not curves:
        return []
    fig, ax = _figure(len(curves), 2)
    for row, c in zip(ax, curves):
        a, b = row
        label, unit = KNOBS[c.knob]
        a.plot(c.values, c.compute_s, color="black", linestyle="--", label="T_compute")
        for s in sorted(c.link_s):
            (line,) = a.plot(c.values, c.link_s[s], label=f"T_comm {s}")
            frac = [x / t if t > 0 else 0.0 for x, t in zip(c.exposed_s[s], c.link_s[s])]
            b.plot(c.values, frac, color=line.get_color(), label=s)
            if c.critical.get(s) is not None:
                i = c.values.index(c.critical[s])
                a.plot([c.values[i]], [c.link_s[s][i]], marker="o", color=line.get_color())
                a.annotate(
                    f"{c.critical[s]:.3g}",
                    (c.values[i], c.link_s[s][i]),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize="x-small",
                    color=line.get_color(),
                )
            if c.hidden.get(s) is not None:
                b.axvline(c.hidden[s], color=line.get_color(), linestyle=":", alpha=0.7)
        for axis in (a, b):
            axis.set_xscale("log", base=2)
            axis.set_xlabel(f"{label} ({unit})")
            axis.grid(True, which="both", alpha=0.3)
        a.set_yscale("log")
        a.set_ylabel("seconds per step")
        a.set_title("T_comm per strategy vs T_compute (o: critical point T_comm <= T_compute)", fontsize="small")
        b.set_ylabel("exposed fraction 1 - r")
        b.set_ylim(-0.02, 1.02)
        dotted = any(c.hidden.get(s) is not None for s in c.link_s)
        b.set_title("exposed after overlap" + (" (dotted: fully hidden from here)" if dotted else ""), fontsize="small")
        a.legend(fontsize="x-small")
        b.legend(fontsize="x-small")
    if title:
        fig.suptitle(title)
    return _save(fig, out_dir, stem)


def codesign_for_record(rec: dict) -> list[CodesignCurve]:
    """Co-design curves of a sweep row's best plan, for every knob that changes something."""
    case = Case(**{k: rec[k] for k in AXES_COLUMNS})
    model, cluster, workload = case.problem()
    config = ParallelConfig.from_dict(rec["estimate"]["config"])
    knobs = ["nvlink_gbps", "nic_gbps"]
    if any(e.bw_bytes_per_s > 0 and e.scopes for e in cluster.device.dma_engines):
        knobs.append("dma_engines")
    return [codesign_curve(model, cluster, workload, config, k) for k in knobs]


# --------------------------------------------------------------------------- DMA engine count
def plot_dma_engines(records: list[dict], out_dir: Path, stem: str = "dma_engines") -> list[Path]:
    """For each problem swept over ``--dma-engines`` (:func:`planner.sweep.codesign.dma_series`, at
    most 6): the best plan's step time against the engine count, each point labelled with its
    chunks and DMA assignment, and its binding ``T_comm`` against ``T_compute`` (the columns of
    :func:`~planner.sweep.codesign.critical_columns`), the count from which the critical
    condition holds marked."""
    from .codesign import dma_series

    series = [s for s in dma_series(records) if any(r.get("status") == "ok" for r in s.records)][:6]
    if not series:
        return []
    fig, ax = _figure(len(series), 2)
    for (a, b), s in zip(ax, series):
        ok = [r for r in s.records if r.get("status") == "ok"]
        x = [r["dma_engines"] for r in ok]
        a.plot(x, [r["step_time_s"] for r in ok], marker="o", color="black")
        for r in ok:
            a.annotate(
                f"chunks {r.get('chunks')}\n{r.get('dma_assignment') or ''}",
                (r["dma_engines"], r["step_time_s"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="xx-small",
            )
        a.set_ylabel("step time (s)")
        a.set_title(s.label(), fontsize="small")
        crit = [r for r in ok if r.get("t_comm_s") is not None and r.get("t_compute_s") is not None]
        if crit:
            xc = [r["dma_engines"] for r in crit]
            b.plot(xc, [r["t_comm_s"] for r in crit], marker="o", label="T_comm (binding strategy)")
            b.plot(
                xc,
                [r["t_compute_s"] for r in crit],
                marker="s",
                linestyle="--",
                color="black",
                label="T_compute (its window)",
            )
            for r in crit:
                b.annotate(
                    r.get("critical_strategy") or "",
                    (r["dma_engines"], r["t_comm_s"]),
                    textcoords="offset points",
                    xytext=(4, -10),
                    fontsize="x-small",
                )
        if s.holds_from is not None:
            b.axvline(s.holds_from, color="green", linestyle=":", label=f"T_comm <= T_compute from {s.holds_from}")
        b.set_ylabel("seconds per step")
        b.set_title("critical condition T_comm <= T_compute", fontsize="small")
        b.legend(fontsize="x-small")
        for axis in (a, b):
            axis.set_xscale("log", base=2)
            axis.set_xticks(s.engines, [str(n) for n in s.engines])
            axis.set_xlabel(f"{KNOBS['dma_engines'][0]} ({KNOBS['dma_engines'][1]})")
            axis.grid(True, which="both", alpha=0.3)
    fig.suptitle("best plan vs DMA engine count")
    return _save(fig, out_dir, stem)


# --------------------------------------------------------------------------- all
def plot_sweep(results_dir, out_dir=None, *, codesign_per_model: int = 1) -> list[Path]:
    """Every plot of the sweep in ``results_dir``, into ``out_dir`` (default ``results_dir/plots``).

    Co-design plots: for each model (and cluster), the ``codesign_per_model`` largest GPU
    counts with a plan.
    """
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir / "plots"
    records = ResultStore(results_dir).read()
    paths = plot_scaling(records, out) + plot_tp_pp(records, out) + plot_dma_engines(records, out)
    best = defaultdict(list)
    for r in records:
        if r["status"] == "ok" and r.get("estimate"):
            best[(r["model"], r["cluster"])].append(r)
    for (model, cluster), rs in sorted(best.items()):
        rs.sort(key=lambda r: -r["gpus"])
        for r in rs[:codesign_per_model]:
            title = (
                f"{model} on {r['gpus']} x {cluster}, batch {r['global_batch']} x {r['seq']}: "
                f"tp={r['tp']} pp={r['pp']} dp={r['dp']} cp={r['cp']} ep={r['ep']}"
            )
            stem = f"codesign_{_slug(model)}_{_slug(cluster)}_{r['gpus']}gpus"
            paths += plot_codesign(codesign_for_record(r), out, stem, title)
    return paths
