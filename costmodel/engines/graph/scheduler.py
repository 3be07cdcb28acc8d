"""Event-driven list scheduler of an op graph on one compute unit and the device's DMA engines.

Resources (source document section 1, "independent execution units"; section 8, hardware):

* **compute**: one stream; compute ops run in program order (``seq``), each once its inputs
  exist (CUDA-stream semantics: a kernel waits for the one before it).
* **DMA engines**: ``count`` engines per class; a communication op holds one engine of its
  class from start to finish (prerequisite 2, hardware concurrency). Ready ops take free
  engines in priority order: the op whose first consumer comes earliest in program order first.
* **links**: transfers on one link (``intra``/``inter``) share it; bandwidth goes to the
  higher-priority transfer first (a fluid, work-conserving share), so adding engines or
  bandwidth never takes bandwidth from an op that had it.
* **interference**: while a transfer on an engine class with ``uses_compute`` (NCCL kernels
  on SMs) progresses, compute runs at ``1 - comm_compute_interference`` of its speed (at
  ``1 - sm_share`` beside a transfer whose kernels hold SMs of their own, DeepEP's); dedicated
  DMA engines leave compute alone.

While the compute stream stalls, the transfers in progress are charged the stall (split evenly
when several progress at once), so each op's exposed time is at most its own duration and
``T_eff = T_compute + sum_s (1 - r_s) T_comm_s`` holds exactly. Each exposed op gets the
prerequisite that failed: ``no free engine`` if it waited for an engine, or for its link while
another strategy's transfer held it, or held the link while the op compute needed waited
(hardware concurrency); else ``synchronous issue`` if it was issued blocking; else ``data
dependency``: its consumer needed it before enough independent compute had run (including
waiting behind the same strategy's earlier transfers, when its T_comm exceeds the window). ``T_eff = T_compute + (1 - r) T_comm`` (section 2) then holds per graph with
``T_eff`` the makespan less interference.

>>> from costmodel.spec.presets import load_cluster
>>> from costmodel.engines.graph.nodes import GraphBuilder
>>> b = GraphBuilder(load_cluster("h100-sxm"))
>>> g1 = b.compute("dgrad", "gemm", 1.0)
>>> ar = b.comm("ar", "allreduce", 0, 8, 1, "tp", deps=[g1], duration_s=0.6)
>>> g2 = b.compute("wgrad", "gemm", 0.5)
>>> nxt = b.compute("next", "elementwise", 0.2, deps=[ar])
>>> s = schedule(b.graph, Resources(engines=(("nccl-sm", 1),)))
>>> round(s.makespan_s, 3), round(s.exposed_s["tp"], 3), s.exposures[0].prerequisite
(1.8, 0.1, 'data dependency')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

from costmodel.physics.comm import dma as _dma
from costmodel.spec import dma_plan as _dma_plan
from costmodel.spec.specs import DeviceSpec
from costmodel.engines.graph.indexed import IndexedGraph, index
from costmodel.engines.graph.nodes import COMPUTE

EPS = 1e-15
NO_ENGINE = "no free engine"
SYNC = "synchronous issue"
DATA = "data dependency"


@dataclass(frozen=True)
class Resources:
    """What a graph runs on. ``engines``: (class name, count) pairs; ``uses_compute``: classes
    whose transfers slow compute by ``interference`` (a fraction in [0, 1))."""

    engines: tuple[tuple[str, int], ...]
    uses_compute: frozenset = frozenset()
    interference: float = 0.0


def resources_for(dev: DeviceSpec, dma: _dma_plan.Assignment | None = None) -> Resources:
    """The compute and DMA resources of one device: its engine classes and, under a DMA
    assignment (:mod:`costmodel.physics.comm.dma`), one pool per group of streams with the engines it was
    given (communication that shares a pool queues for its engines).

    >>> from costmodel.spec.presets import load_cluster
    >>> resources_for(load_cluster("a100-80g").device)
    Resources(engines=(('nccl-sm', 4),), uses_compute=frozenset({'nccl-sm'}), interference=0.1)
    >>> resources_for(load_cluster("sg2262-like").device, _dma_plan.parse("tp:cdma*3,dp:cdma*1")).engines[-2:]
    (('cdma/tp', 3), ('cdma/dp', 1))
    """
    pools = _dma.pool_counts(dma)
    compute = {e.name for e in dev.dma_engines if e.uses_compute}
    return Resources(
        tuple((e.name, e.count) for e in dev.dma_engines) + pools,
        frozenset(compute | {p for p, _ in pools if p.split("/", 1)[0] in compute}),
        dev.comm_compute_interference,
    )


@dataclass(frozen=True)
class Exposure:
    """Seconds of compute-stream stall charged to one communication op, and why."""

    node: str
    strategy: str
    kind: str
    exposed_s: float
    prerequisite: str  # data dependency | no free engine | synchronous issue
    detail: str


@dataclass(frozen=True)
class Schedule:
    """Result of :func:`schedule` (SI units). ``lanes`` maps each node to its lane in a
    timeline: ``compute`` or ``<engine class>#<index>``. ``extra``: ``phase_s`` (nominal compute
    seconds by phase: fwd, bwd, recompute) and ``graph`` (the graph that was scheduled)."""

    start: dict
    end: dict
    lanes: dict
    makespan_s: float
    compute_s: float
    interference_s: float
    idle_s: float
    link_s: dict
    exposed_s: dict
    exposures: tuple
    critical_path: tuple
    compute_critical_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def comm_s(self) -> float:
        return sum(self.link_s.values())

    @property
    def exposed_total_s(self) -> float:
        return sum(self.exposed_s.values())

    def rates(self) -> dict:
        """Overlap rate ``r = 1 - exposed / T_comm`` per strategy (section 2)."""
        return {
            s: min(1.0, max(0.0, 1.0 - self.exposed_s.get(s, 0.0) / t)) if t > 0 else 1.0
            for s, t in sorted(self.link_s.items())
        }

    def reasons(self) -> dict:
        """The prerequisite behind the largest exposure of each strategy."""
        out: dict = {}
        for e in sorted(self.exposures, key=lambda e: -e.exposed_s):
            out.setdefault(e.strategy, f"{e.prerequisite}: {e.detail}")
        return out


def _priorities(ig: IndexedGraph) -> list:
    """Program position of the first compute op that (transitively through comm) consumes each node."""
    prio = [math.inf] * len(ig.names)
    is_comm, seq = ig.is_comm, ig.seq
    for n in range(len(prio) - 1, -1, -1):
        best = math.inf
        for s in ig.succ[n]:
            best = min(best, prio[s] if is_comm[s] else seq[s])
        prio[n] = best
    return prio


def schedule(g: nx.DiGraph, res: Resources) -> Schedule:
    """Schedule ``g`` on ``res``; see the module docstring for the rules.

    Raises ``ValueError`` when ``g`` has a cycle or a comm op whose engine class is absent.
    Nodes are handled by their index in program order (:mod:`.indexed`); results are keyed by name.
    """
    ig = index(g)
    names, succ, pred, dur = ig.names, ig.succ, ig.pred, ig.duration_s
    resource, link, strategy, is_comm = ig.resource, ig.link, ig.strategy, ig.is_comm
    N = len(names)
    attrs = g.nodes
    counts = dict(res.engines)
    for pool, n in g.graph.get(
        "dma_pools", ()
    ):  # the engine pools the graph was built for (costmodel.physics.comm.dma)
        counts.setdefault(pool, n)
    for n in range(N):
        if is_comm[n] and resource[n] not in counts:
            raise ValueError(f"node {names[n]!r}: no DMA engine class {resource[n]!r}")
    if not ig.acyclic():
        raise ValueError("the op graph has a cycle")
    prio = _priorities(ig)
    key = [(prio[n], ig.seq[n]) for n in range(N)]
    # the compute slowdown of each SM-based transfer: its own (sm_share) or the device's
    own = ig.sm_share
    uses_sm = [
        is_comm[n] and (own[n] is not None or resource[n].split("/", 1)[0] in res.uses_compute) for n in range(N)
    ]
    f_sm = [res.interference if own[n] is None else own[n] for n in range(N)]
    remaining = list(dur)
    npred = [len(p) for p in pred]
    start, end, lanes, slot_of = {}, {}, {}, {}
    wait = [0.0] * N  # seconds ready but held back by an engine or by another strategy on its link
    queued = [0.0] * N  # seconds behind the same strategy's transfers on its link
    corder = [n for n in range(N) if not is_comm[n]]
    free_slots = {name: list(range(c)) for name, c in counts.items()}
    waiting: list = []  # ready comm ops without an engine
    active: list = []  # comm ops holding an engine
    exposures, exposed_by, blame = [], {}, {}
    t, ci, running, idle = 0.0, 0, None, 0.0

    def finish(n):
        end[n] = t
        if is_comm[n]:
            free_slots[resource[n]].append(slot_of[n])
        for s in succ[n]:
            npred[s] -= 1
            if npred[s] == 0 and is_comm[s]:
                waiting.append(s)

    for n in range(N):
        if npred[n] == 0 and is_comm[n]:
            waiting.append(n)
    while True:
        progressed = True
        while progressed:  # start whatever can start at time t
            progressed = False
            if waiting and any(free_slots.values()):
                waiting.sort(key=key.__getitem__)
                held, started = [], []
                for n in waiting:
                    slots = free_slots[resource[n]]
                    if slots:
                        slots.sort()
                        slot_of[n] = slots.pop(0)
                        lanes[n] = f"{resource[n]}#{slot_of[n]}"
                        start[n] = t
                        active.append(n)
                        started.append(n)
                    else:
                        held.append(n)
                waiting[:] = held
                progressed = bool(started)
                for n in started:  # zero-length transfers end at once (the others hold more than EPS)
                    if remaining[n] <= EPS:
                        active.remove(n)
                        finish(n)
            if running is None and ci < len(corder) and npred[corder[ci]] == 0:
                n = corder[ci]
                ci += 1
                start[n], lanes[n] = t, COMPUTE
                if remaining[n] <= EPS:
                    finish(n)
                else:
                    running = n
                progressed = True
        if running is None and not active:
            if ci < len(corder) or waiting:
                raise ValueError("scheduler stalled: an op can never become ready")
            break
        # rates: bandwidth of each link to its highest-priority active transfer first (rate 1),
        # the others on that link wait (rate 0)
        holder = {}
        for n in sorted(active, key=key.__getitem__) if len(active) > 1 else active:
            if link[n] not in holder:
                holder[link[n]] = n
        moving = [n for n in active if holder[link[n]] == n]
        slow = 0.0
        for n in moving:
            if uses_sm[n] and f_sm[n] > slow:
                slow = f_sm[n]
        crate = 1.0 - slow
        dt = math.inf
        if running is not None:
            dt = remaining[running] / crate
        for n in moving:
            dt = min(dt, remaining[n])
        if running is None:  # compute stalls: charge the transfers that progress meanwhile
            nxt = corder[ci] if ci < len(corder) else None
            blockers = [names[q] for q in pred[nxt] if q not in end] if nxt is not None else []
            for n in moving:
                exposed_by[n] = exposed_by.get(n, 0.0) + dt / len(moving)
                blame.setdefault(n, {}).update(dict.fromkeys(blockers))  # first-seen order: no hash-seed dependence
            if not moving:
                idle += dt
        t += dt
        if waiting:  # no engine: behind its own strategy's transfers, or another's
            strats: dict = {}  # engine class -> strategies of the transfers holding its engines
            for a in active:
                strats.setdefault(resource[a], set()).add(strategy[a])
            for n in waiting:
                held_by = strats.get(resource[n])
                if held_by is None or (len(held_by) == 1 and strategy[n] in held_by):
                    queued[n] += dt
                else:
                    wait[n] += dt
        for n in active:
            h = holder[link[n]]
            if h == n:
                remaining[n] -= dt
            elif strategy[h] == strategy[n]:
                queued[n] += dt
            else:
                wait[n] += dt
        tol = max(EPS, 1e-12 * t)
        done = [n for n in active if remaining[n] <= tol]
        for n in done:
            remaining[n] = 0.0
            active.remove(n)
            finish(n)
        if running is not None:
            remaining[running] -= dt * crate
            if remaining[running] <= tol:
                remaining[running] = 0.0
                finish(running)
                running = None

    makespan = max(end.values(), default=0.0)
    link_s, exposed_s = {}, {}
    for n in range(N):
        if is_comm[n]:
            s = strategy[n]
            link_s[s] = link_s.get(s, 0.0) + dur[n]
    for n, x in exposed_by.items():
        s = strategy[n]
        exposed_s[s] = exposed_s.get(s, 0.0) + x
        exposures.append(
            Exposure(names[n], s, attrs[names[n]]["kind"], x, *_why(g, names[n], wait[n], queued[n], blame.get(n, ())))
        )
    nominal = sum(dur[n] for n in corder)
    interference = sum(end[n] - start[n] for n in corder) - nominal
    crit = _critical_path(ig, start, end, corder)
    phase_s: dict = {}
    for n in corder:
        ph = attrs[names[n]]["phase"]
        phase_s[ph] = phase_s.get(ph, 0.0) + dur[n]
    return Schedule(
        {names[n]: v for n, v in start.items()},
        {names[n]: v for n, v in end.items()},
        {names[n]: v for n, v in lanes.items()},
        makespan,
        nominal,
        max(0.0, interference),
        idle,
        link_s,
        exposed_s,
        tuple(exposures),
        crit,
        _compute_critical_s(ig, corder),
        {"phase_s": phase_s, "graph": g},
    )


def _why(g, n, waited_s, queued_s, blockers) -> tuple[str, str]:
    a = g.nodes[n]
    t_comm = a["duration_s"]
    others = [b for b in blockers if b != n and not nx.has_path(g, n, b)]
    if others and len(others) == len(blockers):
        b = g.nodes[others[0]]
        return NO_ENGINE, (
            f"it held the {a['link']} link while {b['strategy']} {b['kind']} {others[0]!r}, "
            "which the stalled compute needed, waited for an engine or bandwidth"
        )
    if waited_s > 1e-3 * max(t_comm, EPS):
        return NO_ENGINE, (
            f"waited {waited_s * 1e3:.3f} ms for a {a['resource']} engine or for the "
            f"{a['link']} link held by another strategy's transfer"
        )
    if a["issue"] == "sync":
        return SYNC, "issued blocking: the compute stream waits for it"
    if queued_s > 1e-3 * max(t_comm, EPS):
        return DATA, (
            f"queued {queued_s * 1e3:.3f} ms behind earlier {a['strategy']} transfers on the "
            f"{a['link']} link: their T_comm outlasts the compute that could hide them"
        )
    return DATA, (
        f"T_comm {t_comm * 1e3:.3f} ms outlasts the independent compute issued after it (its consumer needs the result)"
    )


def _critical_path(ig: IndexedGraph, start: dict, end: dict, corder: list) -> tuple:
    """Walk back from the last op through the input or stream predecessor that set each start."""
    if not ig.names:
        return ()
    is_comm = ig.is_comm
    prev_compute = {b: a for a, b in zip(corder, corder[1:])}
    n = max(range(len(ig.names)), key=lambda x: (end[x], -is_comm[x]))
    path = [n]
    while True:
        cands = list(ig.pred[n])
        if not is_comm[n] and n in prev_compute:
            cands.append(prev_compute[n])
        cands = [p for p in cands if end[p] >= start[n] - 1e-12]
        if not cands:
            break
        n = max(cands, key=lambda p: (end[p], is_comm[p]))
        path.append(n)
    return tuple(ig.names[i] for i in reversed(path))


def _compute_critical_s(ig: IndexedGraph, corder: list) -> float:
    """Longest chain of compute durations when communication takes no time (stream order kept)."""
    return sum(ig.duration_s[n] for n in corder)
