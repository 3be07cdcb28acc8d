"""Building op graphs: compute and communication nodes with the attributes of the package schema.

A :class:`GraphBuilder` appends nodes in program order (``seq``), wires data dependencies and
times communication with :func:`costmodel.physics.comm.collectives.collective_time_s` (one formula for
collective time in the project). Communication is placed on the DMA engine class that serves
its scope (a group inside one node is ``intra``, one that spans nodes ``inter``; Megatron-LM
rank layout, see :func:`costmodel.physics.comm.groups.layout`).

>>> from costmodel.spec.presets import load_cluster
>>> b = GraphBuilder(load_cluster("a100-80g"))
>>> x = b.compute("fc2", "gemm", 1e-3)
>>> ar = b.comm("fc2.ar", "allreduce", 100e6, 8, 1, "tp", deps=[x])
>>> y = b.compute("bda2", "elementwise", 1e-4, deps=[ar])
>>> g = b.graph
>>> g.nodes[ar]["resource"], g.nodes[ar]["link"], round(g.nodes[ar]["duration_s"] * 1e3, 2)
('nccl-sm', 'intra', 0.8)
>>> sorted(g.edges)
[('fc2', 'fc2.ar'), ('fc2.ar', 'bda2')]
"""

from __future__ import annotations

from typing import Iterable

import networkx as nx

from costmodel.physics.comm import dma as _dma
from costmodel.spec import dma_plan as _dma_plan
from costmodel.physics.comm.collectives import KINDS as COMM_KINDS, collective_time_s
from costmodel.physics.comm.groups import comm_scope as _scope
from costmodel.compose.overlap import TRAINING_STRATEGIES
from costmodel.spec.specs import ClusterSpec

COMPUTE_KINDS = ("gemm", "attention", "elementwise", "sink")
COMPUTE = "compute"


def comm_scope(kind: str, size: int, stride: int, cluster: ClusterSpec) -> str:
    """``'inter'`` when a group of ``size`` ranks at ``stride`` spans nodes, else ``'intra'``
    (:func:`costmodel.physics.comm.groups.comm_scope` on the cluster's nodes).

    >>> from costmodel.spec.presets import load_cluster
    >>> cl = load_cluster("a100-80g")
    >>> comm_scope("allreduce", 8, 1, cl), comm_scope("allreduce", 4, 8, cl), comm_scope("p2p", 2, 8, cl)
    ('intra', 'inter', 'inter')
    """
    return _scope(kind, size, stride, cluster.domain)


class GraphBuilder:
    """Appends nodes to a :class:`networkx.DiGraph` in program order.

    Parameters
    ----------
    cluster : the cluster whose links and DMA engines time and carry communication.
    prefix : prepended to every node name (to compose graphs without name clashes).
    dma : the plan's DMA assignment (:mod:`costmodel.physics.comm.dma`): each strategy's communication runs on
        its stream's engine pool (resource ``<class>/<streams>``) at the bandwidth of the engines
        it was given; ``None``: on the class serving its scope, with all its engines.
    """

    def __init__(self, cluster: ClusterSpec, prefix: str = "", dma: _dma_plan.Assignment | None = None):
        self.cluster = cluster
        self.prefix = prefix
        self.dma = dma
        self.graph = nx.DiGraph(dma_pools=_dma.pool_counts(dma))  # the pools, read by the scheduler
        self._pending_sync: list[str] = []

    def _name(self, name: str) -> str:
        full = self.prefix + name
        if full in self.graph:
            raise ValueError(f"node {full!r} already exists")
        return full

    def _wire(self, node: str, deps: Iterable[str]) -> None:
        self.graph.add_edges_from([(d, node) for d in deps if d is not None])

    def compute(self, name: str, kind: str, duration_s: float, deps: Iterable[str] = (), *, phase: str = "fwd") -> str:
        """Add a compute op; it also waits for every synchronously issued comm op before it."""
        if kind not in COMPUTE_KINDS:
            raise ValueError(f"kind={kind!r}: must be one of {', '.join(COMPUTE_KINDS)}")
        node = self._name(name)
        self.graph.add_node(
            node,
            kind=kind,
            duration_s=max(0.0, float(duration_s)),
            resource=COMPUTE,
            link="",
            bytes=0.0,
            strategy="",
            issue="sync",
            phase=phase,
            seq=len(self.graph),
        )
        self._wire(node, list(deps) + self._pending_sync if self._pending_sync else deps)
        self._pending_sync = []
        return node

    def comm(
        self,
        name: str,
        kind: str,
        nbytes: float,
        size: int,
        stride: int,
        strategy: str,
        deps: Iterable[str] = (),
        *,
        issue: str = "async",
        phase: str = "fwd",
        duration_s: float | None = None,
        sm_share: float | None = None,
        tables: bool | None = None,
    ) -> str:
        """Add a collective of ``nbytes`` per GPU over ``size`` ranks at ``stride``.

        ``issue="sync"`` makes the next compute op added wait for it (a blocking call).
        ``duration_s`` overrides the collective time (for synthetic graphs in tests).
        ``sm_share``: the fraction by which it slows compute while it runs, where its kernels hold SMs of their
        own (DeepEP's: :func:`costmodel.physics.comm.ep_dispatch.ep_sm_share`); ``None``: its engine class's.
        ``tables``: whether a measured table may time it (:func:`collective_time_s`).
        """
        if kind not in COMM_KINDS:
            raise ValueError(f"kind={kind!r}: must be one of {', '.join(COMM_KINDS)}")
        if strategy not in TRAINING_STRATEGIES:
            raise ValueError(f"strategy={strategy!r}: must be one of {', '.join(TRAINING_STRATEGIES)}")
        if issue not in ("async", "sync"):
            raise ValueError(f"issue={issue!r}: must be 'async' or 'sync'")
        scope = comm_scope(kind, size, stride, self.cluster)
        if duration_s is None:
            duration_s = collective_time_s(
                kind,
                nbytes,
                size,
                stride,
                self.cluster,
                engines=_dma.engines_of(self.cluster, self.dma, strategy),
                tables=tables,
            )
        resource = _dma.pool_of(self.dma, strategy) or self.cluster.device.engines_for(scope).name
        node = self._name(name)
        self.graph.add_node(
            node,
            kind=kind,
            duration_s=max(0.0, float(duration_s)),
            resource=resource,
            link=scope,
            bytes=float(nbytes),
            strategy=strategy,
            issue=issue,
            phase=phase,
            seq=len(self.graph),
        )
        if sm_share is not None:
            self.graph.nodes[node]["sm_share"] = float(sm_share)
        self._wire(node, deps)
        if issue == "sync":
            self._pending_sync.append(node)
        return node

    def sink(self, name: str, deps: Iterable[str] = (), *, phase: str = "fwd") -> str:
        """A zero-length compute marker: the point where the next layer (or step) may begin."""
        return self.compute(name, "sink", 0.0, deps, phase=phase)
