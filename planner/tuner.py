"""``Planner``: one problem, configured once, asked many times (the API for autotuners).

Parameters follow scikit-learn: ``__init__`` only stores them (no file is read, nothing is
checked or computed there); the specs are resolved on first use and a bad value raises
:class:`~costmodel.spec.errors.SpecError` then, naming the field.

>>> p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
>>> p.evaluate({"tp": 2, "pp": 1, "mb": 1}).config.dp          # dp fills the GPUs: 8 / 2
4
>>> configs = p.space(tp=[1, 2], pp=1, zero=1, bucket_mb=40.0, chunks=1)
>>> scores = p.evaluate_many(configs)
>>> len(scores) == len(configs), all(s.status == "ok" for s in scores)
(True, True)
>>> best = p.rank(configs)[0]
>>> best.fits, best.step_time_s == min(s.step_time_s for s in scores if s.fits)
(True, True)
>>> [s.step_time_s <= 1.05 * best.step_time_s for s in p.prune(configs, within=0.05)][:1]
[True]
"""

from __future__ import annotations

import itertools
import warnings

from costmodel.spec.plan_checks import GRAD_DTYPES
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.spec.plan_checks import FRAMEWORKS
from costmodel.frameworks.rules import check_runnable
from costmodel.training.estimate import Estimate
from costmodel.api import evaluate as _evaluate
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload

from costmodel.training.fastpath import Score, Scorer
from search.options import ANSWER_OPTIONS, PREFER_DEFAULT

from .problem import SPLIT_KEYS, make_config, make_workload, resolve_cluster, resolve_model
from .report import warn_if_tight

__all__ = ["Planner", "Score"]

#: ``space()`` defaults that keep the enumeration to thousands, not millions, of plans
SPACE_DEFAULTS = {
    "chunk_options": (1, 4),
    "bucket_mb_options": (0, 40),
    "partial_recompute": False,
    "uneven_stages": False,
}


class Planner:
    """Evaluate, enumerate, rank, prune and recommend parallel plans of one training problem.

    Parameters
    ----------
    model, cluster : a spec object, a preset name or a JSON/YAML file path.
    gpus : total GPUs. global_batch : sequences per step. seq : tokens per sequence.
    dtype : GEMM format (``bf16``, ``fp16``, ``fp8``).
    framework : ``megatron``, ``deepspeed`` or ``fsdp2``: the framework of every plan this
        planner builds (a config that names none runs under it), enumerates and recommends
        (:mod:`costmodel.frameworks.rules`), as ``planner.recommend(framework=...)``.
    grad_dtype : ``fp32``, ``bf16`` or ``fp16``: the gradient dtype of every plan it builds and
        recommends (``ParallelConfig.grad_dtype``), as ``planner.recommend(grad_dtype=...)``.
    """

    def __init__(
        self,
        model,
        cluster,
        gpus: int,
        global_batch: int,
        seq: int,
        dtype: str = "bf16",
        framework: str = "megatron",
        grad_dtype: str = "fp32",
    ):
        self.model = model
        self.cluster = cluster
        self.gpus = gpus
        self.global_batch = global_batch
        self.seq = seq
        self.dtype = dtype
        self.framework = framework
        self.grad_dtype = grad_dtype

    def get_params(self) -> dict:
        """The constructor's parameters (scikit-learn convention)."""
        return {
            k: getattr(self, k)
            for k in ("model", "cluster", "gpus", "global_batch", "seq", "dtype", "framework", "grad_dtype")
        }

    def set_params(self, **params) -> "Planner":
        """Change parameters (scikit-learn convention); the problem is resolved again on next use.

        >>> Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096).set_params(gpus=16).gpus
        16
        """
        for k, v in params.items():
            if k not in self.get_params():
                raise SpecError(k, v, f"a Planner parameter ({', '.join(self.get_params())})")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(
            f"{k}={v!r}" if not isinstance(v, (ModelSpec, ClusterSpec)) else f"{k}={v.name!r}"
            for k, v in self.get_params().items()
        )
        return f"Planner({args})"

    # ---- resolved problem (lazily, once per parameter set)
    def _problem(self) -> tuple[ModelSpec, ClusterSpec, Workload, Scorer]:
        key = tuple(id(v) if isinstance(v, (ModelSpec, ClusterSpec)) else v for v in self.get_params().values())
        cached = getattr(self, "_resolved", None)
        if cached is None or cached[0] != key:
            if self.framework not in FRAMEWORKS:
                raise SpecError("framework", self.framework, f"one of {', '.join(FRAMEWORKS)}")
            if self.grad_dtype not in GRAD_DTYPES:
                raise SpecError("grad_dtype", self.grad_dtype, f"one of {', '.join(GRAD_DTYPES)}")
            m = resolve_model(self.model)
            cl = resolve_cluster(self.cluster, self.gpus)
            w = make_workload(self.global_batch, self.seq, self.dtype)
            self._resolved = (key, (m, cl, w, Scorer(m, cl, w)))
        return self._resolved[1]

    def config(self, config: ParallelConfig | dict | None = None, **fields_) -> ParallelConfig:
        """A :class:`ParallelConfig` from a config, a dict of its keys and/or keyword fields
        (``dp`` defaults to ``gpus / (tp * pp * cp)``)."""
        if isinstance(config, ParallelConfig) and not fields_:
            return config
        if isinstance(config, dict):
            fields_ = {**config, **fields_}
            config = None
        elif config is not None and not isinstance(config, ParallelConfig):
            raise SpecError("config", config, "a ParallelConfig or a dict of its keys")
        if config is None:  # a plan that names no framework (gradient dtype) runs under the planner's
            fields_.setdefault("framework", self.framework)
            fields_.setdefault("grad_dtype", self.grad_dtype)
        if any(k in fields_ for k in SPLIT_KEYS) or (config is None and "layers_per_stage" in fields_):
            from .api import config_with_split  # uneven stages: Megatron's rules need the model's depth

            return config_with_split(self._problem()[0], self.gpus, config, fields_)
        return make_config(self.gpus, base=config, **fields_)

    def _limits(self, constraints: dict, defaults: dict):
        """``(search.problem.Limits, {variable: allowed values})`` from keyword constraints
        (:func:`planner.limits.limits_of`, the translation ``recommend`` and the CLI use too)."""
        from search.problem import Limits

        from .limits import limits_of

        return limits_of(self._problem()[0].layers, constraints, Limits(**defaults), stacklevel=3)

    # ---- questions
    def evaluate(
        self, config: ParallelConfig | dict | None = None, *, engine: str | None = None, **fields_
    ) -> Estimate:
        """The full :class:`~costmodel.training.estimate.Estimate` of one plan, by ``engine`` (``"graph"``: the
        op-graph scheduler, ``"analytic"``: the overlap rules; default: :func:`costmodel.api.evaluate`'s).

        A plan :meth:`evaluate_many` scores invalid raises the :class:`SpecError` it gives as the reason: one that
        breaks a rule, or one its framework cannot run (``tp=4, sp=True, chunks=8`` under Megatron-Core:
        :func:`costmodel.frameworks.rules.check_runnable`)."""
        m, cl, w, _ = self._problem()
        config = self.config(config, **fields_)
        check_runnable(config, cl.device)  # as evaluate_many: the same plan is invalid either way (issue 42)
        est = _evaluate(m, cl, w, config) if engine is None else _evaluate(m, cl, w, config, engine=engine)
        warn_if_tight(est)  # the user's plan: a tight one is evaluated with a warning (issue 42)
        return est

    def evaluate_many(self, configs, *, exact: bool = False) -> list[Score]:
        """One :class:`Score` per config, in order; invalid configs get ``status="invalid"``.

        Every entry is scored, none raises: a plan that breaks a rule (``{"tp": 3}`` on 8 GPUs:
        no dp fills them), one its framework cannot run (``tp=4, chunks=8`` under Megatron-Core,
        whose userbuffers overlap runs ``chunks = tp``: :func:`costmodel.frameworks.rules.check_runnable`)
        and an entry that is no config at all (an unknown key, a non-integer degree; its
        ``config`` is None) are scored invalid with the reason.

        The analytical fast path (:mod:`costmodel.training.fastpath`) gives the numbers of
        ``evaluate(engine="analytic")`` without its per-stage report; ``exact=True`` runs that
        full evaluation on each. :meth:`rank`, :meth:`prune` and :meth:`space` score with it.
        """
        m, cl, w, scorer = self._problem()
        out = []
        for c in configs:
            if not isinstance(c, ParallelConfig):
                try:
                    c = self.config(c)
                except (SpecError, TypeError, ValueError) as e:  # no valid plan, or no config at all
                    out.append(Score.invalid(self._as_given(c), str(e), cl.device.hbm_bytes))
                    continue
            try:
                check_runnable(c, cl.device)
            except SpecError as e:
                out.append(Score.invalid(c, str(e), cl.device.hbm_bytes))
                continue
            if exact:
                try:
                    out.append(Score.from_estimate(_evaluate(m, cl, w, c, engine="analytic")))
                except SpecError as e:
                    out.append(Score.invalid(c, str(e), cl.device.hbm_bytes))
            else:
                out.append(scorer.score(c))
        return out

    def _as_given(self, config) -> ParallelConfig | None:
        """``config`` as a :class:`ParallelConfig` without filling dp (for an invalid score), or
        None when it is no config at all."""
        if not isinstance(config, (dict, ParallelConfig)):
            return None
        try:
            return make_config(
                None,
                base=config if isinstance(config, ParallelConfig) else None,
                **(config if isinstance(config, dict) else {}),
            )
        except (SpecError, TypeError, ValueError):
            return None

    def space(self, *, fits: bool = True, limits=None, **constraints) -> list[ParallelConfig]:
        """Every valid plan, from the search's candidate lists (:mod:`search.candidates`),
        optionally (``fits``) only those that fit in memory.

        ``constraints``: a config variable fixed (``tp=8``) or limited to some values
        (``pp=[1, 2, 4]``), ``<var>_min``/``<var>_max`` bounds (``tp_max=8``, as ``--tp-max 8``;
        the old ``max_tp`` still works, with a DeprecationWarning), or a
        :class:`search.problem.Limits` option (``mb_max=4``, ``chunk_options=(1, 2)``). Without
        options, chunks are 1 or 4, buckets 0 or 40 MB, pipeline stages hold equal layer counts and
        full recompute covers every layer (``uneven_stages=True``, ``partial_recompute=True``
        widen the space, by a factor of tens to thousands).
        """
        from search.candidates import Split, splits
        from search.exhaustive import all_choices
        from search.problem import Problem

        m, cl, w, scorer = self._problem()
        lim, allowed = self._limits(constraints, defaults=SPACE_DEFAULTS)
        lim = limits or lim
        problem = Problem(
            model=m, cluster=cl, workload=w, limits=lim, framework=self.framework, grad_dtype=self.grad_dtype
        )
        out = []
        for choice in all_choices(problem):
            s = choice.shape
            stage_splits = (
                [None]
                if s.pp == 1 or not lim.uneven_stages
                else [Split(*t).layers_per_stage(s.pp) for t in splits(m.layers, s.pp, choice.vp)]
            )
            if lim.layers_per_stage is not None:  # a pinned split is the only one
                stage_splits = [lim.layers_per_stage]
            for lps in stage_splits:
                c = choice.config(
                    flash_attention=lim.flash_attention, layers_per_stage=lps, fused_elementwise=lim.fused_elementwise
                )
                if allowed and any(getattr(c, k) not in vals for k, vals in allowed.items() if k != "bucket_mb"):
                    continue
                score = scorer.score(c)  # drops plans that break a divisibility rule
                if score.status != "ok" or (
                    fits and (not score.fits or score.peak_memory_bytes > problem.hbm_cap_bytes)
                ):
                    continue
                out.append(c)
        return out

    def rank(self, configs, *, key: str = "step_time_s") -> list[Score]:
        """Valid plans that fit, best first by ``key`` (``step_time_s`` ascending; ``mfu`` or
        ``tokens_per_s`` descending)."""
        scores = [s for s in self.evaluate_many(configs) if s.ok]
        if key not in ("step_time_s", "mfu", "tokens_per_s", "peak_memory_bytes"):
            raise SpecError("key", key, "one of step_time_s, mfu, tokens_per_s, peak_memory_bytes")
        reverse = key in ("mfu", "tokens_per_s")
        return sorted(scores, key=lambda s: getattr(s, key), reverse=reverse)

    def prune(self, configs, *, keep: int | None = None, within: float | None = None) -> list[Score]:
        """The plans worth measuring: those that fit, fastest first, at most ``keep`` of them and
        only those within ``within`` (a fraction: 0.1 = 10 %) of the fastest step time."""
        if keep is not None and (not isinstance(keep, int) or keep < 1):
            raise SpecError("keep", keep, "a positive integer")
        if within is not None and not within >= 0:
            raise SpecError("within", within, "a non-negative fraction (0.1 = within 10 % of the best)")
        ranked = self.rank(configs)
        if within is not None and ranked:
            limit = ranked[0].step_time_s * (1 + within)
            ranked = [s for s in ranked if s.step_time_s <= limit]
        return ranked[:keep] if keep is not None else ranked

    def recommend(
        self,
        top_k: int = 1,
        constraints: dict | None = None,
        *,
        time_limit_s: float = ANSWER_OPTIONS.time_limit_s,
        workers: int = ANSWER_OPTIONS.workers,
        seed: int = ANSWER_OPTIONS.seed,
        rescore: bool = ANSWER_OPTIONS.rescore,
        memory_margin: float = ANSWER_OPTIONS.memory_margin,
        prefer: str = PREFER_DEFAULT,
        k: int | None = None,
    ):
        """The CP-SAT search's answer, exactly as :func:`planner.recommend` gives it: a
        :class:`search.result.SolveResult` with ``.status``, ``.best`` and the ``top_k`` best
        ``.plans`` (each ``.config``, ``.estimate``, ``.to_dict()``), the bound and gap.

        ``constraints`` are those of :meth:`space` (``{"tp": 8, "pp_max": 16}``), with the
        search's own default candidate lists. A problem with no plan that fits is not an
        exception: ``.status`` is ``"INFEASIBLE"``, ``.best`` is None, ``.explanation`` says
        why and ``.changes`` the smallest changes that give it a plan. (``k`` is the old name
        of ``top_k``, kept with a DeprecationWarning.)

        The solver options default to :data:`search.options.ANSWER_OPTIONS`, as ``planner recommend``'s do, so
        the answer is the CLI's (the op-graph re-score, the memory margin kept, ``prefer="safe"``);
        ``rescore=False`` is the opt-out for an autotuner that wants the analytic optimum fast.

        >>> p = Planner(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=4096)
        >>> r = p.recommend(top_k=2, constraints={"tp": 2})
        >>> r.status, [plan.config.tp for plan in r.plans], r.best.estimate.fits
        ('OPTIMAL', [2, 2], True)
        """
        from .api import recommend

        if k is not None:
            warnings.warn("Planner.recommend(k=...) is deprecated; write top_k=", DeprecationWarning, stacklevel=2)
            top_k = k
        m, cl, w, _ = self._problem()
        return recommend(
            m,
            cl,
            w,
            time_limit_s=time_limit_s,
            workers=workers,
            seed=seed,
            top_k=top_k,
            rescore=rescore,
            memory_margin=memory_margin,
            prefer=prefer,
            framework=self.framework,
            grad_dtype=self.grad_dtype,
            **(constraints or {}),
        )


def grid(**values) -> list[dict]:
    """Dicts of every combination of the given lists (a quick way to build configs).

    >>> grid(tp=[1, 2], pp=[1])
    [{'tp': 1, 'pp': 1}, {'tp': 2, 'pp': 1}]
    """
    keys = list(values)
    return [dict(zip(keys, combo)) for combo in itertools.product(*values.values())]
