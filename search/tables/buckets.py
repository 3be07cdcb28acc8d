"""The step-end gradient buckets of a stage over its layer count, as the framework issues them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.frameworks import rules as frameworks
from costmodel.compose.stage_terms import dp_latency
from costmodel.physics.mechanics.grad_buckets import stage_grad_buckets
from costmodel.compose.step import dp_buckets
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.units import MB

from ..choice import Choice
from .probe import probe_split, with_layers_per_stage


class BucketTerms:
    """The DP bucket terms of :class:`search.tables.Tables` (mixed in; reads ``p`` and the affine
    terms, fills ``_affine`` and ``_parts``)."""

    def dp_buckets(self, choice: Choice, kind: str, at=None) -> dict:
        """The step-end gradient collectives of a stage at ``kind`` as arrays over its layer count
        ``n``, as :func:`costmodel.compose.stage_terms.stage_dp_terms` charges them: ``buckets`` (how many),
        ``pieces`` (``(k_first, k_rest)``, or ``None``) and the per-bucket latencies ``lat_grad``,
        ``lat_param`` (the framework's buckets: :func:`costmodel.physics.mechanics.grad_buckets.stage_grad_buckets`,
        one probe split per ``n``). ``at`` (an integer array of layer counts): the same entries at
        those counts only, probing the buckets only there (the DP bound asks for the few counts a
        stage's memory allows; every value is elementwise, so each entry equals the full array's)."""
        key = (
            "buckets",
            choice.shape,
            choice.zero,
            choice.framework,
            kind,
            choice.dma,
            choice.options,
            choice.vp,
            choice.bucket_mb,
            choice.grad_dtype,
        )
        full = self._affine.get(key)
        if full is None and at is None:
            full = self._affine[key] = self._dp_buckets(choice, kind, None)
        if at is None:
            return full
        if full is not None:
            return {
                k: (None if v is None else tuple(np.asarray(x)[at] for x in v)) if k == "pieces" else np.asarray(v)[at]
                for k, v in full.items()
            }
        # entries by layer count, each computed once (the DP bounds of a choice's ZeRO stages and
        # buckets, and of its refinements, ask again for overlapping counts)
        pts = self._parts.setdefault(("buckets_at",) + key, {})
        ns = at.tolist()
        if not ns:
            return self._dp_buckets(choice, kind, at)
        # the same counts again (choices that differ in what the key leaves out: recompute, chunks, sp,
        # mb), the same arrays: read-only, as every caller reads them (GPT-3: 2,362 calls, 822 distinct)
        done = self._parts.setdefault(("buckets_at_out",) + key, {})
        hit = done.get(tuple(ns))
        if hit is not None:
            return hit
        todo = [n for n in ns if n not in pts]
        if todo:
            b = self._dp_buckets(choice, kind, np.array(todo))
            pieces = b["pieces"]
            for j, n in enumerate(todo):
                pts[n] = (
                    b["buckets"][j],
                    b["lat_grad"][j],
                    b["lat_param"][j],
                    None if pieces is None else (pieces[0][j], pieces[1][j]),
                )
        rows = [pts[n] for n in ns]
        out = {
            name: np.array([r[i] for r in rows], dtype=float)
            for i, name in enumerate(("buckets", "lat_grad", "lat_param"))
        }
        out["pieces"] = (
            None if rows[0][3] is None else tuple(np.array([r[3][i] for r in rows], dtype=float) for i in range(2))
        )
        for v in [out["buckets"], out["lat_grad"], out["lat_param"]] + list(out["pieces"] or ()):
            v.flags.writeable = False
        done[tuple(ns)] = out
        return out

    def _dp_buckets(self, choice: Choice, kind: str, at) -> dict:
        p, a = self.p, self.affine(choice, kind)
        sel = (lambda x: x) if at is None else (lambda x: x[at])
        counts = self._bucket_counts(choice, kind, at)
        if counts is None:
            return dict(
                buckets=dp_buckets(sel(a["grad_bytes"]), choice.bucket_mb * MB),
                pieces=None,
                lat_grad=sel(a["lat_grad"]),
                lat_param=sel(a["lat_param"]),
            )
        n_all, nd, ne, k_first, k_rest = counts
        lps, stage = probe_split(p, choice, kind, self._probe_n(choice, kind))
        c = choice.plain_config(lps)
        st = self.state(choice, kind)
        lat_grad, lat_param = dp_latency(
            p.model, p.cluster, c, stage, (sel(st["dense"]), sel(st["expert"])), counts=(nd, ne)
        )
        return dict(buckets=n_all, pieces=(k_first, k_rest), lat_grad=lat_grad, lat_param=lat_param)

    def _bucket_counts(self, choice: Choice, kind: str, at=None):
        """``(collectives, dense, expert, k_first, k_rest)`` arrays over ``n`` (one probe split
        per ``n``; ``at``: at those ``n`` only), or ``None`` where the framework's buckets are not
        modelled; they depend on the shape, framework, ZeRO stage, interleaving, bucket and gradient
        dtype only, and under Megatron-Core on less (:meth:`_bucket_class`). Each ``n`` is probed once
        (:meth:`_bucket_points`), whichever call asks first."""
        key = (
            "bucket_counts",
            choice.shape,
            choice.zero,
            choice.framework,
            kind,
            choice.vp,
            choice.bucket_mb,
            choice.grad_dtype,
        )
        if key not in self._affine:
            cls = self._bucket_class(choice, kind)
            if cls is not None and cls in self._affine:
                self._affine[key] = self._affine[cls]
            elif at is not None:
                return self._bucket_points(choice, kind, cls or key, at)
            else:
                self._affine[key] = self._bucket_points(choice, kind, cls or key, np.arange(self.p.model.layers + 1))
                if cls is not None:
                    self._affine[cls] = self._affine[key]
        out = self._affine[key]
        return out if at is None or out is None else tuple(x[at] for x in out)

    def _bucket_points(self, choice: Choice, kind: str, key, ns):
        """:meth:`bucket_counts_of` at the layer counts ``ns``, each probed once per ``key`` (the
        choice's bucket class) and kept: the same ``stage_grad_buckets`` call per ``n``."""
        pts = self._parts.setdefault(("bucket_points", key), {})
        if pts.get("none"):
            return None
        todo = [int(n) for n in ns if int(n) not in pts]
        if todo:
            p, c = self.p, self._bucket_config(choice, kind)
            for n in todo:
                lps, stage = probe_split(p, choice, kind, max(n, 1))
                gb = stage_grad_buckets(p.model, with_layers_per_stage(c, lps), stage)
                if gb is None:
                    pts["none"] = True
                    return None
                pts[n] = (gb.count, gb.dense_count, gb.expert_count) + gb.pieces()
        rows = np.array([pts[int(n)] for n in ns], dtype=float).reshape(len(ns), 5)
        return tuple(rows[:, i].copy() for i in range(5))

    def _bucket_config(self, choice: Choice, kind: str) -> ParallelConfig:
        """The validated config :meth:`bucket_counts_of` probes (one layer count changed per probe)."""
        key = (
            "bucket_config",
            choice.shape,
            choice.zero,
            choice.framework,
            kind,
            choice.vp,
            choice.bucket_mb,
            choice.grad_dtype,
        )
        if key not in self._parts:
            base = replace(choice, recompute="none", recompute_layers=None, dma=None, options=())
            self._parts[key] = base.config(layers_per_stage=probe_split(self.p, choice, kind, 1)[0])
        return self._parts[key]

    def _bucket_class(self, choice: Choice, kind: str):
        """What Megatron-Core's step-end buckets of a probed stage depend on, as a cache key shared by
        the shapes that differ elsewhere (the searches ask for hundreds of shapes, ~100 probes each);
        ``None`` for other frameworks. :func:`costmodel.physics.mechanics.grad_buckets.stage_grad_buckets` (Megatron
        branch) reads: the layer tensors (``tp``, ``ep``, expert TP = ``tp`` without EP; on stage 0
        only, the one bucketed: elsewhere only which buffers are empty), the stage's
        chunks (``vp`` and its own layer count ``n``; dense or MoE by the layers before it), whether
        it holds the embedding (stage 0) and the head (the last stage), bucketing (stage 0 only, the
        bucket size in gradient elements: ``bucket_mb``, ``grad_dtype``; on the other stages only
        ``overlapped = bucket_bytes > 0``), ``frameworks.of`` (the framework and ZeRO stage under
        Megatron: whether it has a ``step_grad``, nothing else) and of the DP degree only whether the dense and the
        expert gradient groups have more than one rank (``dp * cp > 1``, ``expert_dp > 1``). The
        rest is fixed by ``kind``: :func:`probe_split` puts ``max(1, dense_layers)`` layers on stage 0,
        so a probed middle or last stage starts past the dense layers for every ``pp`` (all MoE), and
        ``first`` / ``mid`` / ``last`` / ``only`` say which of stage 0 and the last stage it is
        (``tests/test_search_tables.py`` checks the class against the probes themselves)."""
        if choice.framework != "megatron":
            return None
        if not frameworks.lookup(choice.framework, choice.zero).step_grad:
            return ("bucket_class", None)  # stage_grad_buckets is None (Megatron FSDP): for every shape
        s = choice.shape
        expert_tp = s.tp if s.ep == 1 else 1
        edp = max(1, s.tp * s.dp * s.cp // (s.ep * expert_tp))  # costmodel.physics.memory.stage_contents.expert_dp
        # of the ZeRO stage only ``step_grad`` (above) is read; the bucket size and gradient dtype only as
        # stage 0's bucket size (first / only), elsewhere only whether the buckets overlap (bucket > 0)
        if kind in ("first", "only"):
            return (
                "bucket_class",
                s.tp,
                s.ep,
                kind,
                choice.vp,
                (choice.bucket_mb, choice.grad_dtype),
                s.dp * s.cp > 1,
                edp > 1,
            )
        # past stage 0 no chunk is bucketed: each buffer holding any tensor issues one collective
        # (grad_buckets.close_ge_runs with bucket None), so the tensors' sizes, and with them tp and
        # ep, are not read; only which chunks hold dense / expert tensors (vp, n, kind)
        return ("bucket_class", kind, choice.vp, choice.bucket_mb > 0, s.dp * s.cp > 1, edp > 1)

    def bucket_counts_of(self, choice: Choice, kind: str):
        """:meth:`_bucket_counts` probed without its cache: one ``stage_grad_buckets`` per ``n``."""
        p, L = self.p, self.p.model.layers
        out = tuple(np.zeros(L + 1) for _ in range(5))
        base = replace(choice, recompute="none", recompute_layers=None, dma=None, options=())
        c = base.config(layers_per_stage=probe_split(p, choice, kind, 1)[0])  # validated once
        for n in range(L + 1):  # no stage holds 0 layers: its entry is never valid, kept finite
            lps, stage = probe_split(p, choice, kind, max(n, 1))
            gb = stage_grad_buckets(p.model, with_layers_per_stage(c, lps), stage)
            if gb is None:
                return None
            out[0][n], out[1][n], out[2][n] = gb.count, gb.dense_count, gb.expert_count
            out[3][n], out[4][n] = gb.pieces()
        return out
