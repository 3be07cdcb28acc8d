"""A serving plan as launch arguments for vLLM, SGLang and TensorRT-LLM.

Flag names are those the engines document (checked in ``tests/test_emit_serving.py``):

* vLLM ``vllm/engine/arg_utils.py`` (vllm-project/vllm, commit 99d7eb5d) and the engine-argument
  docs (https://docs.vllm.ai/en/v0.8.5/serving/engine_args.html): ``--tensor-parallel-size``,
  ``--pipeline-parallel-size``, ``--data-parallel-size``, ``--enable-expert-parallel``,
  ``--max-num-seqs``, ``--max-model-len``, ``--max-num-batched-tokens``,
  ``--kv-cache-dtype {auto,fp8,fp8_e5m2,fp8_e4m3}``, ``--quantization fp8``. With expert
  parallelism vLLM sets ``EP = TP x DP`` (https://docs.vllm.ai/en/latest/serving/expert_parallel_deployment/).
* SGLang ``docs/advanced_features/server_arguments.md`` (sgl-project/sglang, commit b36e8e19):
  ``--tp-size``, ``--pp-size``, ``--dp-size``, ``--ep-size``, ``--enable-dp-attention``,
  ``--max-running-requests``, ``--context-length``, ``--chunked-prefill-size``,
  ``--kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3}``, ``--quantization fp8``.

* TensorRT-LLM ``trtllm-serve`` (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html):
  ``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_batch_size``, ``--max_seq_len``,
  ``--max_num_tokens``, ``--extra_llm_api_options FILE`` (YAML; ``enable_chunked_prefill: true``,
  ``kv_cache_config: {dtype: fp8}``).
  It has no data-parallel flag: replicas are separate servers.

Speculative decoding (:mod:`costmodel.serving.speculative`; :func:`speculative_args`): vLLM ``--speculative-config``
JSON with ``method`` ``deepseek_mtp`` (the model's MTP module; ``vllm/config/speculative.py`` ``MTPModelTypes``) or
``eagle3`` with the draft's ``model``, and ``num_speculative_tokens`` K; SGLang ``--speculative-algorithm EAGLE``
(on an MTP model SGLang drafts with its NextN weights; ``EAGLE3`` and ``--speculative-draft-model-path`` for a draft
head) ``--speculative-num-steps K --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1`` (a chain of K
drafts, as modelled); TensorRT-LLM ``speculative_config: {decoding_type: MTP, num_nextn_predict_layers: K}`` in the
options YAML (MTP only: its EAGLE settings are not emitted).

The parallel settings come from :func:`search.infer.server_layout` (the one table of what each
engine can run, :data:`search.infer.ENGINES`); :func:`search.infer.engine_config` reads them
back, so ``exact`` says the arguments run the evaluated plan. Concurrency limits
(``--max-num-seqs`` / ``--max-running-requests`` / ``--max_batch_size``) are the plan's
sequences per replica. ``replicas`` > 1: run that many identical servers behind a load
balancer. What an engine cannot express is returned as a note (``exact`` false), never
silently dropped.

>>> from costmodel.spec.plan import ParallelConfig
>>> launch = serving_launch(ParallelConfig(tp=8), input_len=2000, output_len=500, batch_per_replica=64)
>>> launch["vllm"]["command"]
'vllm serve $MODEL --tensor-parallel-size 8 --max-num-seqs 64 --max-model-len 2500 --kv-cache-dtype auto'
>>> launch["sglang"]["command"]
'python -m sglang.launch_server --model-path $MODEL --tp-size 8 --max-running-requests 64 --context-length 2500 --kv-cache-dtype auto'
"""

from __future__ import annotations

import json
import shlex

from costmodel.spec.plan import ParallelConfig
from search.serving_engines import ENGINES, ServerLayout, server_layout

VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8"}
SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3"}
MODEL = "$MODEL"
TRTLLM_OPTIONS = "serve.yaml"

#: each engine's flag for each setting (``None``: the engine has no such flag)
FLAGS = {
    "vllm": dict(
        head="vllm serve {model}",
        tp="--tensor-parallel-size",
        pp="--pipeline-parallel-size",
        dp="--data-parallel-size",
        ep=None,
        expert_parallel="--enable-expert-parallel",
        dp_attention=None,
        seqs="--max-num-seqs",
        length="--max-model-len",
        kv="--kv-cache-dtype",
        kv_values=VLLM_KV,
        prefill="--max-num-batched-tokens",
        quantization="--quantization",
    ),
    "sglang": dict(
        head="python -m sglang.launch_server --model-path {model}",
        tp="--tp-size",
        pp="--pp-size",
        dp="--dp-size",
        ep="--ep-size",
        expert_parallel=None,
        dp_attention="--enable-dp-attention",
        seqs="--max-running-requests",
        length="--context-length",
        kv="--kv-cache-dtype",
        kv_values=SGLANG_KV,
        prefill="--chunked-prefill-size",
        quantization="--quantization",
    ),
    "trtllm": dict(
        head="trtllm-serve {model}",
        tp="--tp_size",
        pp="--pp_size",
        dp=None,
        ep="--ep_size",
        expert_parallel=None,
        dp_attention=None,
        seqs="--max_batch_size",
        length="--max_seq_len",
        kv=None,
        kv_values=None,
        prefill="--max_num_tokens",
        quantization=None,
    ),
}


def _fallback(engine: str, c: ParallelConfig) -> tuple[ServerLayout, list[str]]:
    """The nearest layout for a plan the engine cannot run exactly, and what differs."""
    notes = []
    if c.sp or c.chunks > 1:
        notes.append(
            f"sp={c.sp} chunks={c.chunks}: {ENGINES[engine].title} has no launch setting for this; "
            "the prediction assumed it (plan with --engine to search only what it runs)"
        )
    tp, pp, dp, ep = c.tp, c.pp, c.dp, c.ep
    if engine == "vllm":
        if ep > 1 and ep in (tp * dp, tp):
            return (
                ServerLayout(tp, pp, dp, ep, expert_parallel=True)
                if ep == tp * dp
                else ServerLayout(tp, pp, 1, ep, expert_parallel=True, replicas=dp)
            ), notes
        if ep > 1:
            notes.append(
                f"ep={ep}: vLLM's expert parallelism spans TP x DP ({tp * dp}); "
                "no flag gives this degree, experts are TP-sharded instead"
            )
        return ServerLayout(tp, pp, dp), notes
    if engine == "sglang":
        if ep > tp:
            if ep != tp * dp:
                notes.append(f"ep={ep} < tp*dp={tp * dp}: SGLang's DP attention spreads experts over all GPUs")
            return ServerLayout(tp * dp, 1, dp, tp * dp, dp_attention=True), notes
        return ServerLayout(tp, pp, dp, ep), notes
    if ep > tp or (ep > 1 and tp % ep):
        notes.append(f"ep={ep}: TensorRT-LLM's --ep_size divides --tp_size ({tp}); experts are TP-sharded instead")
        ep = 1
    return ServerLayout(tp, pp, 1, ep, replicas=dp), notes


def engine_launch(
    engine: str,
    c: ParallelConfig,
    *,
    input_len: int,
    output_len: int,
    batch_per_replica: int,
    kv_dtype: str = "bf16",
    dtype: str = "bf16",
    prefill_tokens: int | None = None,
    model: str = MODEL,
    moe: bool | None = None,
    speculation: dict | None = None,
) -> dict:
    """``{"args", "command", "notes", "replicas", "exact", "files"}`` of one engine for plan ``c``; ``speculation``
    the estimate's (``InferenceEstimate.serving["speculation"]``).

    ``moe``: whether the model has experts (``None``: assumed when ``c.ep > 1``); vLLM runs a
    MoE model's replicas without EP as separate servers (one server's ``--data-parallel-size``
    would TP-shard the experts over TP x DP GPUs).
    """
    f = FLAGS[engine]
    lay = server_layout(engine, c, c.ep > 1 if moe is None else moe)
    exact = lay is not None
    notes: list[str] = []
    if lay is None:
        lay, notes = _fallback(engine, c)
    args = [f["tp"], str(lay.tp_size)]
    if lay.pp_size > 1:
        args += [f["pp"], str(lay.pp_size)]
    if lay.dp_size > 1:
        args += [f["dp"], str(lay.dp_size)]
    if lay.dp_attention:
        args += [f["dp_attention"]]
    if lay.expert_parallel:
        args += [f["expert_parallel"]]
    elif lay.ep_size > 1:
        args += [f["ep"], str(lay.ep_size)]
    if moe is None and engine == "vllm" and c.ep == 1 and lay.dp_size > 1:
        notes.append(
            "for a MoE model run the replicas as separate servers instead: with --data-parallel-size "
            "vLLM shards the experts over TP x DP GPUs"
        )
    args += [f["seqs"], str(batch_per_replica), f["length"], str(input_len + output_len)]
    files = {}
    if f["kv"]:
        args += [f["kv"], f["kv_values"][kv_dtype]]
    elif engine == "trtllm":  # chunked context, as costmodel.serving.engines models it (off by default)
        files[TRTLLM_OPTIONS] = "enable_chunked_prefill: true\n" + (
            "kv_cache_config:\n  dtype: fp8\n" if kv_dtype == "fp8" else ""
        )
    if prefill_tokens is not None:
        args += [f["prefill"], str(prefill_tokens)]
    if speculation:
        args, files = speculative_args(engine, speculation, args, files, notes)
    if files:
        args += ["--extra_llm_api_options", TRTLLM_OPTIONS]
        notes.append(f"{TRTLLM_OPTIONS}: " + files[TRTLLM_OPTIONS].replace("\n", " ").strip())
    if dtype == "fp8":
        if f["quantization"]:
            args += [f["quantization"], "fp8"]
            if engine == "vllm":
                notes.append(
                    "fp8 weights: --quantization fp8 quantizes a BF16 checkpoint; drop it for an FP8 checkpoint"
                )
        else:
            notes.append("fp8 weights: serve an FP8-quantized checkpoint (TensorRT-LLM reads the quantization from it)")
    if lay.replicas > 1:
        notes.append(
            f"run {lay.replicas} such servers behind a load balancer, each on "
            f"{lay.tp_size * lay.pp_size * lay.dp_size} GPUs"
        )
    head = f["head"].format(model=model)
    return {
        "args": args,
        "command": " ".join([head, *map(shlex.quote, args)]),
        "head": head,
        "notes": notes,
        "replicas": lay.replicas,
        "exact": exact,
        "files": files,
    }


def speculative_args(engine: str, spec: dict, args: list, files: dict, notes: list) -> tuple[list, dict]:
    """``args`` and ``files`` with the engine's speculative-decoding settings (module doc); what it cannot express
    goes to ``notes``."""
    k, mtp = spec["draft_tokens"], spec["method"] == "mtp"
    if engine == "vllm":
        cfg = {"method": "deepseek_mtp"} if mtp else {"method": "eagle3", "model": "$DRAFT"}
        cfg["num_speculative_tokens"] = k
        args = [*args, "--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        notes.append(
            "deepseek_mtp: DeepSeek's MTP module (another model's has its own method, e.g. glm4_moe_mtp)"
            if mtp
            else "set $DRAFT to the EAGLE-3 draft checkpoint"
        )
    elif engine == "sglang":
        args = [*args, "--speculative-algorithm", "EAGLE" if mtp else "EAGLE3"]
        if not mtp:
            args += ["--speculative-draft-model-path", "$DRAFT"]
            notes.append("set $DRAFT to the EAGLE-3 draft checkpoint")
        args += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
        args += ["--speculative-num-draft-tokens", str(k + 1)]
    elif mtp:
        yaml = files.get(TRTLLM_OPTIONS, "")
        files = {
            **files,
            TRTLLM_OPTIONS: yaml + f"speculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: {k}\n",
        }
    else:
        notes.append("EAGLE speculative decoding: set speculative_config in the options YAML yourself (not emitted)")
    return args, files


def vllm_args(c: ParallelConfig, **kw) -> tuple[list[str], list[str]]:
    """(arguments after ``vllm serve MODEL``, notes)."""
    d = engine_launch("vllm", c, **kw)
    return d["args"], d["notes"]


def sglang_args(c: ParallelConfig, **kw) -> tuple[list[str], list[str]]:
    """(arguments after ``python -m sglang.launch_server --model-path MODEL``, notes)."""
    d = engine_launch("sglang", c, **kw)
    return d["args"], d["notes"]


def serving_launch(
    c: ParallelConfig,
    *,
    input_len: int,
    output_len: int,
    batch_per_replica: int,
    kv_dtype: str = "bf16",
    dtype: str = "bf16",
    prefill_tokens: int | None = None,
    model: str = MODEL,
    moe: bool | None = None,
    engines=("vllm", "sglang"),
    speculation: dict | None = None,
) -> dict:
    """``{engine: {...}}`` (:func:`engine_launch`) for each of ``engines``."""
    kw = dict(
        input_len=input_len,
        output_len=output_len,
        batch_per_replica=batch_per_replica,
        kv_dtype=kv_dtype,
        dtype=dtype,
        prefill_tokens=prefill_tokens,
        model=model,
        moe=moe,
        speculation=speculation,
    )
    return {name: engine_launch(name, c, **kw) for name in engines}


def launch_for_estimate(
    est,
    workload,
    prefill_tokens: int | None = None,
    model: str = MODEL,
    moe: bool | None = None,
    engines=("vllm", "sglang"),
) -> dict:
    """:func:`serving_launch` for an :class:`~costmodel.serving.inference.InferenceEstimate` of ``workload``."""
    if prefill_tokens is None:  # the step token budget the estimate was simulated with
        prefill_tokens = getattr(est, "serving", {}).get("token_budget")
    return serving_launch(
        est.config,
        input_len=workload.input_len,
        output_len=workload.output_len,
        batch_per_replica=est.batch_per_replica,
        kv_dtype=est.kv_dtype,
        dtype=workload.dtype,
        prefill_tokens=prefill_tokens,
        model=model,
        moe=moe,
        engines=engines,
        speculation=getattr(est, "serving", {}).get("speculation"),
    )
