"""An op graph as plain lists indexed by program position, read once for the scheduler.

A networkx attribute or adjacency lookup costs far more than a list index, and the event loop
of :func:`costmodel.engines.graph.scheduler.schedule` reads every node's attributes and neighbours many
times, so it first copies them here. Node ``i`` is the ``i``-th in program order (``seq``; ties
keep the graph's node order); neighbour lists keep the graph's edge order, so every choice the
scheduler makes (first of equals, iteration order) is the one it made on the graph itself.

>>> import networkx as nx
>>> g = nx.DiGraph()
>>> g.add_node("b", seq=1, duration_s=2.0, resource="compute", link="", strategy="")
>>> g.add_node("a", seq=0, duration_s=1.0, resource="nccl-sm", link="intra", strategy="tp")
>>> g.add_edge("a", "b")
>>> ig = index(g)
>>> ig.names, ig.succ, ig.pred, ig.is_comm, ig.acyclic()
(['a', 'b'], [[1], []], [[], [0]], [True, False], True)
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from costmodel.engines.graph.nodes import COMPUTE


@dataclass(frozen=True)
class IndexedGraph:
    """Per node ``i`` in program order: name, neighbours (indices) and the attributes the
    scheduler reads."""

    names: list
    succ: list  # successor indices, in the graph's edge order
    pred: list  # predecessor indices, in the graph's edge order
    seq: list
    duration_s: list
    resource: list
    link: list
    strategy: list
    is_comm: list
    sm_share: list  # a comm op's own compute slowdown (None: its engine class's)

    def acyclic(self) -> bool:
        """No cycle: every edge runs forward in program order (as :class:`.nodes.GraphBuilder`
        builds them), or else Kahn's algorithm removes every node once its inputs are."""
        if all(p < i for i, ps in enumerate(self.pred) for p in ps):
            return True
        indeg = [len(p) for p in self.pred]
        stack = [i for i, d in enumerate(indeg) if d == 0]
        seen = 0
        while stack:
            i = stack.pop()
            seen += 1
            for s in self.succ[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    stack.append(s)
        return seen == len(indeg)


def index(g: nx.DiGraph) -> IndexedGraph:
    """``g``'s nodes in program order with their neighbours and scheduling attributes."""
    # networkx's own dicts (node -> attributes, node -> {neighbour: edge data}): read-only here
    nodes, succ, pred = g._node, g._succ, g._pred
    order = sorted(nodes, key=lambda n: nodes[n]["seq"])
    pos = {n: i for i, n in enumerate(order)}
    attrs = [nodes[n] for n in order]
    return IndexedGraph(
        names=order,
        succ=[[pos[s] for s in succ[n]] for n in order],
        pred=[[pos[p] for p in pred[n]] for n in order],
        seq=[a["seq"] for a in attrs],
        duration_s=[a["duration_s"] for a in attrs],
        resource=[a["resource"] for a in attrs],
        link=[a.get("link", "") for a in attrs],
        strategy=[a.get("strategy", "") for a in attrs],
        is_comm=[a["resource"] != COMPUTE for a in attrs],
        sm_share=[a.get("sm_share") for a in attrs],
    )
