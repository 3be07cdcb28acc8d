"""DMA-engine assignment: which engines carry each communication stream of a plan.

Source document, section 8 (``seeds/DIGEST.md``): the number of DMA engines bounds how many
communication requests run concurrently, and peak DMA bandwidth bounds ``T_comm``; on the
SG2262 "4x CDMA serve different directions concurrently". Prerequisite 2 of overlap (section 1)
is "a free DMA engine exists". A plan therefore says which engines each of its overlapped
communication *streams* runs on:

* ``tp``: TP AllReduce and SP AllGather/ReduceScatter (incl. the LM head's), ``cp``: the
  context-parallel K/V ring, ``ep``: expert dispatch/combine, ``pp``: pipeline send/recv,
  ``dp``: the gradient reduction (and the tied-embedding gradient all-reduce), ``zero``:
  parameter gathers (ZeRO-1/2 after the step; ZeRO-3/FSDP per layer, with their per-layer
  gradient reduce-scatter).

Rules of an :class:`Assignment` (checked by :func:`check`):

1. It names exactly the streams the plan uses (:func:`used_streams`).
2. A stream runs on one engine class that serves every scope its groups span (``intra``: one
   node, ``inter``: across nodes; Megatron-LM rank layout, :func:`costmodel.physics.comm.groups.layout`).
3. The streams of a class are partitioned into *groups*; a group holds ``engines >= 1`` engines
   of its class, and the groups of a class hold at most its ``count`` engines in all. A stream
   alone in its group has those engines to itself; the streams of one group share them: they
   time-share the group's engines (in the op graph they queue for the group's pool, in the
   closed form they cannot overlap each other).

Charging (one place each): a stream's bandwidth is
``min(link effective bandwidth, engines x per-engine bandwidth)``
(:func:`costmodel.physics.comm.collectives.link_bw_bytes_per_s`; per-engine bandwidth 0 = link-bound, as on
NVIDIA where NCCL runs on SMs). In the op graph each group is a pool of its engine count named
``<class>/<streams>`` (:func:`pool_counts`), so what shares a pool serializes.

:func:`assignments` lists the choices a search considers (module rule 3 with every engine used:
by monotonicity an idle engine never helps). Per class with ``n`` streams and ``k`` engines:

* ``k >= n``: every stream its own group, the engines split as a composition of ``k`` into ``n``
  positive parts: ``C(k-1, n-1)`` choices (k=4: 1, 3, 3, 1 for n=1..4; k=8, n=6: 21);
* ``k < n``: ``k`` groups of one engine, the streams set-partitioned over them: Stirling
  ``S(n, k)`` choices (n=5: 15, 25, 10 for k=2..4; n=6, k=3: 90, the largest case with 6 streams).

The default (:func:`default_assignment`, first in the list) splits the engines as evenly as
possible; with fewer engines than streams it puts streams that cross the same link together
(they already share that link's bandwidth), the inter-node ones in the larger groups.

>>> from costmodel.spec.presets import load_cluster
>>> from costmodel.spec.plan import ParallelConfig
>>> cl = load_cluster("sg2262-like").with_gpus(64)
>>> c = ParallelConfig(tp=8, pp=4, dp=2)
>>> str(default_assignment(cl, c)), len(assignments(cl, c))
('tp:cdma*2,pp:cdma*1,dp:cdma*1', 3)
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

from costmodel.frameworks import rules as frameworks
from costmodel.physics.comm.groups import comm_scope, group_stride
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, DmaEngineClass
from costmodel.spec.dma_plan import STREAMS, STREAM_OF, Group, Assignment, _fail

if TYPE_CHECKING:  # config imports this module (the ``dma`` field)
    from costmodel.spec.plan import ParallelConfig
    from costmodel.spec.specs import ModelSpec


# --------------------------------------------------------------------------- what a plan uses
def _edp(c: "ParallelConfig") -> int:
    """Expert-data-parallel degree (the ranks that replicate an expert; Megatron-Core)."""
    return c.tp * c.dp * c.cp // (c.ep * c.expert_tp())


def _dp_groups(c: "ParallelConfig") -> list[tuple[int, int]]:
    """``(size, stride)`` of the gradient/parameter groups: dense over DP x CP, experts over EDP."""
    groups = [(c.dp * c.cp, group_stride("dpcp", c.tp, c.cp, c.dp))]
    if c.ep > 1:
        groups.append((_edp(c), group_stride("edp", c.tp, c.cp, c.dp, c.ep, c.expert_tp())))
    return [(n, s) for n, s in groups if n > 1]


def _tied(c: "ParallelConfig", model: "ModelSpec | None") -> list[tuple[int, int]]:
    """The first/last-stage word-embedding gradient all-reduce group (Megatron-LM), if any."""
    if model is not None and model.tied_embeddings and c.pp > 1:
        return [(2, group_stride("pp", c.tp, c.cp, c.dp) * (c.pp - 1))]
    return []


def used_streams(c: "ParallelConfig", model: "ModelSpec | None" = None) -> tuple[str, ...]:
    """The streams plan ``c`` has traffic on (``model`` only adds the tied-embedding reduction).

    >>> from costmodel.spec.plan import ParallelConfig
    >>> used_streams(ParallelConfig(tp=8, pp=4, dp=2, zero=1)), used_streams(ParallelConfig(dp=8, zero=3))
    (('tp', 'pp', 'dp', 'zero'), ('zero',))
    """
    sem = frameworks.of(c)
    groups = _dp_groups(c)
    on = {
        "tp": c.tp > 1,
        "cp": c.cp > 1,
        "ep": c.ep > 1,
        "pp": c.pp > 1,
        "dp": bool(sem.step_grad and groups) or bool(_tied(c, model)),
        "zero": bool(groups) and (sem.step_param_gather or (sem.per_microbatch and c.dp * c.cp > 1)),
    }
    return tuple(s for s in STREAMS if on[s])


def stream_scopes(cluster: ClusterSpec, c: "ParallelConfig", model: "ModelSpec | None" = None) -> dict:
    """``{stream: frozenset of 'intra'/'inter'}``: the links each used stream's groups cross."""
    gpn = cluster.domain
    cp_stride = group_stride("cp", c.tp, c.cp, c.dp)
    dp = [comm_scope("allreduce", n, s, gpn) for n, s in _dp_groups(c)]
    out = {
        "tp": [comm_scope("allreduce", c.tp, 1, gpn)],
        "cp": [comm_scope("ring_p2p", c.cp, cp_stride, gpn), comm_scope("allreduce", c.cp, cp_stride, gpn)],
        "ep": [comm_scope("alltoall", c.ep, 1, gpn)],
        "pp": [comm_scope("p2p", c.pp, group_stride("pp", c.tp, c.cp, c.dp), gpn)],
        "dp": dp + [comm_scope("allreduce", n, s, gpn) for n, s in _tied(c, model)],
        "zero": dp,
    }
    return {s: frozenset(out[s]) for s in used_streams(c, model)}


def classes_for(cluster: ClusterSpec, scopes) -> list[DmaEngineClass]:
    """Engine classes of the device that serve every scope in ``scopes``, in device order."""
    return [e for e in cluster.device.dma_engines if set(scopes) <= set(e.scopes)]


# --------------------------------------------------------------------------- enumeration
def _compositions(k: int, n: int):
    """Ordered ways to write ``k`` as ``n`` positive parts (lexicographic)."""
    for cuts in itertools.combinations(range(1, k), n - 1):
        yield tuple(b - a for a, b in zip((0,) + cuts, cuts + (k,)))


def _partitions(items: tuple, k: int):
    """Set partitions of ``items`` into exactly ``k`` non-empty blocks (restricted growth order)."""

    def grow(i, blocks):
        if i == len(items):
            if len(blocks) == k:
                yield tuple(tuple(b) for b in blocks)
            return
        for b in blocks:
            b.append(items[i])
            yield from grow(i + 1, blocks)
            b.pop()
        if len(blocks) < k and len(items) - i > k - len(blocks) - 1:
            blocks.append([items[i]])
            yield from grow(i + 1, blocks)
            blocks.pop()

    yield from grow(0, [])


def _splits(cls: DmaEngineClass, streams: tuple) -> list[tuple[Group, ...]]:
    """Every full use of ``cls``'s engines by ``streams`` (module docstring, the two cases)."""
    k, n = cls.count, len(streams)
    if k >= n:
        return [tuple(Group((s,), cls.name, e) for s, e in zip(streams, parts)) for parts in _compositions(k, n)]
    return [tuple(Group(b, cls.name, 1) for b in blocks) for blocks in _partitions(streams, k)]


def _even(cls: DmaEngineClass, streams: tuple, scopes: dict) -> tuple[Group, ...]:
    """The default split of ``cls`` over ``streams``: as even as possible (module docstring)."""
    k, n = cls.count, len(streams)
    if k >= n:
        return tuple(Group((s,), cls.name, k // n + (i < k % n)) for i, s in enumerate(streams))
    order = sorted(streams, key=lambda s: ("inter" in scopes[s], STREAMS.index(s)))
    sizes = [n // k + (i >= k - n % k) for i in range(k)]  # larger groups last (inter-node streams)
    bounds = list(itertools.accumulate([0] + sizes))
    return tuple(Group(tuple(order[a:b]), cls.name, 1) for a, b in zip(bounds, bounds[1:]))


def _choices(cluster: ClusterSpec, c: "ParallelConfig", model) -> tuple[tuple, dict]:
    scopes = stream_scopes(cluster, c, model)
    options = []
    for s, sc in scopes.items():
        cls = classes_for(cluster, sc)
        if not cls:
            raise SpecError(
                "dma_engines",
                [e.name for e in cluster.device.dma_engines],
                f"an engine class serving {' and '.join(sorted(sc))} for the {s} stream",
            )
        options.append(cls)
    return tuple(scopes), scopes, options


def assignments(cluster: ClusterSpec, c: "ParallelConfig", model: "ModelSpec | None" = None) -> list[Assignment]:
    """Every assignment of the plan's streams that uses all engines of the classes it uses, the
    default first, then in a fixed order (class choices in device order, splits as in
    :func:`_splits`). Size: module docstring. Pass ``model`` to count the tied-embedding
    gradient reduction (a ``dp`` stream with ``pp > 1`` even when ``dp * cp == 1``)."""
    return list(_assignments(cluster, replace(c, dma=None), model))


@lru_cache(maxsize=4096)
def _assignments(cluster, c, model) -> tuple[Assignment, ...]:
    streams, scopes, options = _choices(cluster, c, model)
    default = _default(cluster, c, model)
    out, seen = [default], {default}
    for pick in itertools.product(*options):
        by_class: dict = {}
        for s, cls in zip(streams, pick):
            by_class.setdefault(cls.name, (cls, []))[1].append(s)
        for parts in itertools.product(*(_splits(cls, tuple(ss)) for cls, ss in by_class.values())):
            a = Assignment(tuple(g for part in parts for g in part))
            if a not in seen:
                seen.add(a)
                out.append(a)
    return tuple(out)


def _default(cluster, c, model) -> Assignment:
    streams, scopes, options = _choices(cluster, c, model)
    by_class: dict = {}
    for s, cls in zip(streams, options):
        by_class.setdefault(cls[0].name, (cls[0], []))[1].append(s)
    return Assignment(tuple(g for cls, ss in by_class.values() for g in _even(cls, tuple(ss), scopes)))


def default_assignment(cluster: ClusterSpec, c: "ParallelConfig", model: "ModelSpec | None" = None) -> Assignment:
    """The first class serving each stream's scopes, its engines split as evenly as possible.

    Cached by what the streams and their scopes depend on (:func:`used_streams`,
    :func:`stream_scopes`: the degrees, framework and ZeRO stage), not by the whole plan: the
    search asks for it once per layer timing, and a plan's micro-batch, chunks or recompute do
    not change it."""
    key = (c.tp, c.cp, c.ep, c.pp, c.dp, c.framework, c.zero)
    return _default_of(cluster, key, model)


@lru_cache(maxsize=4096)
def _default_of(cluster, key: tuple, model) -> Assignment:
    tp, cp, ep, pp, dp, framework, zero = key
    from costmodel.spec.plan import ParallelConfig  # the config module imports this one

    return _default(cluster, ParallelConfig(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, framework=framework, zero=zero), model)


# --------------------------------------------------------------------------- checking and use
def check(cluster: ClusterSpec, c: "ParallelConfig", model: "ModelSpec | None" = None) -> None:
    """Raise :class:`SpecError` (field ``dma``) when ``c.dma`` breaks a rule of the module docstring."""
    a = c.dma
    if a is None:
        return
    text = str(a)
    scopes = stream_scopes(cluster, c, model)
    need, have = tuple(scopes), a.streams
    if sum(len(g.streams) for g in a.groups) != len(have):
        _fail(text, "each stream in one group only")
    if set(have) != set(need):
        _fail(text, f"an engine group for each stream the plan uses, and no other: {', '.join(need) or 'none'}")
    classes = {e.name: e for e in cluster.device.dma_engines}
    used: dict = {}
    for g in a.groups:
        e = classes.get(g.engine)
        serving = ", ".join(x.name for x in cluster.device.dma_engines if x.scopes) or "none"
        if e is None:
            _fail(text, f"engine classes of {cluster.device.name}: {serving} (got {g.engine!r})")
        for s in g.streams:
            if not scopes[s] <= set(e.scopes):
                ok = ", ".join(x.name for x in classes_for(cluster, scopes[s])) or "none"
                _fail(
                    text,
                    f"a class serving {'+'.join(sorted(scopes[s]))} for the {s} stream: {ok} "
                    f"({g.engine} serves {'+'.join(e.scopes) or 'no collectives'})",
                )
        used[g.engine] = used.get(g.engine, 0) + g.engines
        if used[g.engine] > e.count:
            _fail(text, f"at most {e.count} {g.engine} engines in all (the groups of {g.engine} hold {used[g.engine]})")


def resolve(cluster: ClusterSpec, c: "ParallelConfig", model: "ModelSpec | None" = None) -> Assignment:
    """``c.dma``, or the default assignment when it is unset (cached by :func:`default_assignment`
    on fewer keys than the whole plan: hashing the plan as well cost more than it saved)."""
    return c.dma if c.dma is not None else default_assignment(cluster, c, model)


def engines_of(cluster: ClusterSpec, a: Assignment | None, strategy: str):
    """``(engine class, engines)`` that carry ``strategy``'s collectives under ``a``, for
    :func:`costmodel.physics.comm.collectives.collective_time_s`; ``None`` (all engines of the class serving
    the scope) when ``a`` is None or does not name the stream."""
    g = a.group_of(STREAM_OF[strategy]) if a is not None else None
    if g is None:
        return None
    for e in cluster.device.dma_engines:
        if e.name == g.engine:
            return e, g.engines
    raise SpecError("dma", str(a), f"engine classes of {cluster.device.name} (got {g.engine!r})")


def pool_of(a: Assignment | None, strategy: str) -> str | None:
    """Op-graph resource of ``strategy``'s communication under ``a`` (None: its class's name)."""
    g = a.group_of(STREAM_OF[strategy]) if a is not None else None
    return g.pool if g is not None else None


def pool_counts(a: Assignment | None) -> tuple[tuple[str, int], ...]:
    """``(pool, engines)`` of every group, for :class:`costmodel.engines.graph.scheduler.Resources`."""
    return tuple((g.pool, g.engines) for g in a.groups) if a is not None else ()


def shared_pools(a: Assignment | None) -> list[tuple[str, ...]]:
    """The streams of each group that holds more than one stream (they cannot overlap each other)."""
    return [g.streams for g in a.groups if len(g.streams) > 1] if a is not None else []


def describe(a: Assignment | None, strategy: str) -> str:
    """What ``strategy``'s stream ran on, for tables: ``cdma*2`` or ``cdma*1 shared with dp``."""
    g = a.group_of(STREAM_OF[strategy]) if a is not None else None
    if g is None:
        return ""
    others = [s for s in g.streams if s != STREAM_OF[strategy]]
    return f"{g.engine}*{g.engines}" + (f" shared with {'+'.join(others)}" if others else "")
