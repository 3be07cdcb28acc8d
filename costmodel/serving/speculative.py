"""Speculative decoding as an engine runs it: K draft tokens proposed, verified in one target step.

With speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
arXiv 2211.17192) a decode step of the serving engine becomes

* **K draft passes**, one token each, over the step's decoding requests: the model's own multi-token-prediction
  module (``mtp``: DeepSeek-V3's MTP layer, vLLM ``"method": "deepseek_mtp"``, SGLang ``--speculative-algorithm
  EAGLE`` on the NextN weights, TensorRT-LLM ``decoding_type: MTP``) or an EAGLE draft head (``eagle``: one decoder
  layer and the LM head, Li et al. 2024, arXiv 2401.15077), each pass priced as one decoder layer of the target
  (:meth:`costmodel.serving.step.StepCost.body_s` over the layers) and the LM head for those requests;
* **one verify pass** of the target over ``1 + K`` tokens of each request (the last accepted token and the K drafts):
  the body and the LM head over ``d (1 + K)`` rows. Its attention reads each request's KV cache once for the
  ``1 + K`` queries (the engines' decode kernels take a short query block; a memory-bound read), so the cached
  tokens it reads are charged once per request; MLA, whose decode kernel is compute-bound on the engines' measured
  tables, is charged per query (:func:`verify_ctx`).

Each request then emits on average :func:`tokens_per_step` tokens per step: with each draft token accepted with
probability ``a`` independently of the others (Leviathan et al. 2023, Eq. 1 with ``gamma = K``), the expected
number of tokens a chain of K drafts yields, the target's own token included, is ``(1 - a^(K+1)) / (1 - a)``.
The acceptance rate is the workload's (the prompts and the draft decide it): it is an input, evidence ``assumed``
unless the user measured it. DeepSeek-V3 reports 85-90% acceptance of its MTP module's second token (DeepSeek-AI
2024, arXiv 2412.19437, section 5.4.3): :data:`MTP_ACCEPTANCE` is the lower end, the default where the model has
an MTP module; an EAGLE draft has no default (its acceptance depends on the draft's training).

Memory: the MTP module's weights (one decoder layer of the model, loaded where the model has one) and its own KV
cache (one layer) are added; an EAGLE draft is sized as one decoder layer of the target (``assumed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ModelSpec

#: speculative methods: the model's own multi-token-prediction module, or an EAGLE draft head
METHODS = ("mtp", "eagle")
#: draft tokens per step accepted (1..MAX_TOKENS; the engines' examples run 1-4)
MAX_TOKENS = 8
#: DeepSeek-V3's MTP second-token acceptance, the low end of the 85-90% it reports (arXiv 2412.19437, section 5.4.3)
MTP_ACCEPTANCE = 0.85


def tokens_per_step(k: int, acceptance: float) -> float:
    """Expected tokens one verify step emits per request with ``k`` drafts accepted i.i.d. with ``acceptance``
    (Leviathan et al. 2023, Eq. 1): ``(1 - a^(k+1)) / (1 - a)``.

    >>> round(tokens_per_step(1, 0.85), 6)
    1.85
    >>> round(tokens_per_step(3, 0.5), 4), tokens_per_step(2, 0.0)
    (1.875, 1.0)
    """
    a = acceptance
    return (1 - a ** (k + 1)) / (1 - a)


@dataclass(frozen=True)
class Speculation:
    """``k`` draft tokens per step by ``method``, each accepted with probability ``acceptance``."""

    k: int
    acceptance: float
    method: str = "mtp"
    evidence: str = "stated"  # the acceptance's: ``stated`` by the user, or ``assumed`` (:data:`MTP_ACCEPTANCE`)

    def __post_init__(self):
        if self.method not in METHODS:
            raise SpecError("spec_method", self.method, f"one of {', '.join(METHODS)}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= MAX_TOKENS:
            raise SpecError("spec_tokens", self.k, f"an integer from 1 to {MAX_TOKENS} (draft tokens per step)")
        a = self.acceptance
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not (0 <= a < 1):
            raise SpecError("spec_accept", a, "a probability in [0, 1): each draft token's acceptance rate")

    @property
    def per_step(self) -> float:
        """Tokens per request per verify step (:func:`tokens_per_step`)."""
        return tokens_per_step(self.k, self.acceptance)

    def to_dict(self) -> dict:
        """The report's (and the launch lines') form: method, draft tokens, acceptance, its evidence, tokens a step."""
        return {
            "method": self.method,
            "draft_tokens": self.k,
            "acceptance": self.acceptance,
            "acceptance_evidence": self.evidence,
            "tokens_per_step": self.per_step,
        }

    def steps(self, output_tokens: int) -> int:
        """Verify steps a request of ``output_tokens`` takes after its first token (the prefill's): the expected
        count, rounded up."""
        return math.ceil((output_tokens - 1) / self.per_step - 1e-9) if output_tokens > 1 else 0


def speculation_for(model: ModelSpec, k: int | None, acceptance: float | None, method: str | None):
    """The :class:`Speculation` of the user's settings, or ``None`` without ``k``; refuses what cannot run: MTP on a
    model without an MTP module, EAGLE without a stated acceptance, settings without ``k``."""
    if k is None:
        for name, v in (("spec_accept", acceptance), ("spec_method", method)):
            if v is not None:
                raise SpecError(name, v, "given with --spec-tokens (draft tokens per step)")
        return None
    method = method or ("mtp" if model.mtp_layers else "eagle")
    if method == "mtp" and not model.mtp_layers:
        raise SpecError("spec_method", "mtp", f"eagle: {model.name} has no multi-token-prediction module")
    if acceptance is None:
        if method != "mtp":
            raise SpecError("spec_accept", None, "a stated acceptance rate for an EAGLE draft (--spec-accept)")
        return Speculation(k=k, acceptance=MTP_ACCEPTANCE, method=method, evidence="assumed")
    return Speculation(k=k, acceptance=acceptance, method=method)


def step_s(price, cost, spec, decodes, ctx, mm=1, tokens=0, sampled=0, pairs=0.0) -> float:
    """One engine step of ``decodes`` decoding requests reading ``ctx`` cached tokens, with ``tokens`` prompt tokens
    (``sampled`` of them completing prompts, ``pairs`` causal pairs) beside them: ``price(tokens, sampled, pairs, ctx,
    micro_batches)`` of the step, and with ``spec`` its verify rows, the cached tokens they are charged for
    (:func:`verify_ctx`) and the draft passes (:func:`draft_s`) of ``cost`` (a
    :class:`costmodel.serving.step.StepCost`). The one pricing of a speculative step (the replay, its stagger period
    and the disaggregated decode pool)."""
    if spec is None:
        return price(decodes + tokens, decodes + sampled, pairs, ctx, mm)
    k = spec.k
    rows = decodes * (1 + k)
    read = verify_ctx(ctx, k, bool(getattr(cost, "mla", False)))
    return price(rows + tokens, rows + sampled, pairs, read, mm) + draft_s(cost, k, decodes)


def verify_ctx(ctx: float, k: int, mla: bool) -> float:
    """Cached tokens the verify step's attention is charged for: read once per request for ``1 + k`` queries, or
    per query where the kernel is compute-bound (MLA; module doc)."""
    return ctx * (1 + k) if mla else ctx


def draft_s(step, k: int, decodes: float) -> float:
    """Seconds of ``k`` draft passes over ``decodes`` requests: each one decoder layer of the target and its LM
    head (module doc); ``step`` a :class:`costmodel.serving.step.StepCost`."""
    if decodes <= 0:
        return 0.0
    return k * (step.body_s(decodes) / step.model.layers + step.head_s(decodes))
