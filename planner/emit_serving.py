"""A serving plan as launch arguments for vLLM and SGLang.

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

Concurrency limits (``--max-num-seqs`` / ``--max-running-requests``) are the plan's sequences
per replica. What an engine cannot express is returned as a note, never silently dropped.

>>> from costmodel.config import ParallelConfig
>>> launch = serving_launch(ParallelConfig(tp=8), input_len=2000, output_len=500, batch_per_replica=64)
>>> launch["vllm"]["command"]
'vllm serve $MODEL --tensor-parallel-size 8 --max-num-seqs 64 --max-model-len 2500 --kv-cache-dtype auto'
>>> launch["sglang"]["command"]
'python -m sglang.launch_server --model-path $MODEL --tp-size 8 --max-running-requests 64 --context-length 2500 --kv-cache-dtype auto'
"""

from __future__ import annotations

from costmodel.config import ParallelConfig

VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8"}
SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3"}
MODEL = "$MODEL"


def _common_notes(c: ParallelConfig) -> list[str]:
    notes = []
    if c.sp or c.chunks > 1:
        notes.append(f"sp={c.sp} chunks={c.chunks}: no launch flag; the engine's fused TP collectives and "
                     "kernel-level overlap (if any) decide this")
    return notes


def vllm_args(c: ParallelConfig, *, input_len: int, output_len: int, batch_per_replica: int,
              kv_dtype: str = "bf16", dtype: str = "bf16", prefill_tokens: int | None = None) -> tuple[list[str], list[str]]:
    """(arguments after ``vllm serve MODEL``, notes) for one engine serving the whole plan."""
    args = ["--tensor-parallel-size", str(c.tp)]
    notes = _common_notes(c)
    if c.pp > 1:
        args += ["--pipeline-parallel-size", str(c.pp)]
    if c.ep > 1 and c.ep == c.tp * c.dp:
        if c.dp > 1:
            args += ["--data-parallel-size", str(c.dp)]
        args += ["--enable-expert-parallel"]  # vLLM: EP = TP x DP
    elif c.ep > 1 and c.ep == c.tp:
        args += ["--enable-expert-parallel"]
        if c.dp > 1:
            notes.append(f"dp={c.dp} with ep=tp: run {c.dp} such servers behind a load balancer "
                         "(one server with --data-parallel-size would make EP = TP x DP)")
    else:
        if c.dp > 1:
            args += ["--data-parallel-size", str(c.dp)]
        if c.ep > 1:
            notes.append(f"ep={c.ep}: vLLM's expert parallelism spans TP x DP ({c.tp * c.dp}); "
                         "no flag gives this degree, experts are TP-sharded instead")
    args += ["--max-num-seqs", str(batch_per_replica), "--max-model-len", str(input_len + output_len),
             "--kv-cache-dtype", VLLM_KV[kv_dtype]]
    if prefill_tokens is not None:
        args += ["--max-num-batched-tokens", str(prefill_tokens)]
    if dtype == "fp8":
        args += ["--quantization", "fp8"]
        notes.append("fp8 weights: --quantization fp8 quantizes a BF16 checkpoint; drop it for an FP8 checkpoint")
    return args, notes


def sglang_args(c: ParallelConfig, *, input_len: int, output_len: int, batch_per_replica: int,
                kv_dtype: str = "bf16", dtype: str = "bf16", prefill_tokens: int | None = None) -> tuple[list[str], list[str]]:
    """(arguments after ``python -m sglang.launch_server --model-path MODEL``, notes)."""
    notes = _common_notes(c)
    if c.ep > c.tp:  # experts span replicas: DP attention, TP (and EP) over all of their GPUs
        args = ["--tp-size", str(c.tp * c.dp), "--dp-size", str(c.dp), "--enable-dp-attention"]
        if c.ep != c.tp * c.dp:
            notes.append(f"ep={c.ep} < tp*dp={c.tp * c.dp}: SGLang's DP attention spreads experts over all GPUs")
        args += ["--ep-size", str(c.tp * c.dp)]
    else:
        args = ["--tp-size", str(c.tp)]
        if c.pp > 1:
            args += ["--pp-size", str(c.pp)]
        if c.dp > 1:
            args += ["--dp-size", str(c.dp)]
        if c.ep > 1:
            args += ["--ep-size", str(c.ep)]
    args += ["--max-running-requests", str(batch_per_replica), "--context-length", str(input_len + output_len),
             "--kv-cache-dtype", SGLANG_KV[kv_dtype]]
    if prefill_tokens is not None:
        args += ["--chunked-prefill-size", str(prefill_tokens)]
    if dtype == "fp8":
        args += ["--quantization", "fp8"]
    return args, notes


def serving_launch(c: ParallelConfig, *, input_len: int, output_len: int, batch_per_replica: int,
                   kv_dtype: str = "bf16", dtype: str = "bf16", prefill_tokens: int | None = None,
                   model: str = MODEL) -> dict:
    """``{"vllm": {...}, "sglang": {...}}``, each with ``args``, ``command`` and ``notes``."""
    kw = dict(input_len=input_len, output_len=output_len, batch_per_replica=batch_per_replica,
              kv_dtype=kv_dtype, dtype=dtype, prefill_tokens=prefill_tokens)
    out = {}
    for name, fn, head in (("vllm", vllm_args, f"vllm serve {model}"),
                           ("sglang", sglang_args, f"python -m sglang.launch_server --model-path {model}")):
        args, notes = fn(c, **kw)
        out[name] = {"args": args, "command": " ".join([head, *args]), "notes": notes}
    return out


def launch_for_estimate(est, workload, prefill_tokens: int | None = None, model: str = MODEL) -> dict:
    """:func:`serving_launch` for an :class:`~costmodel.inference.InferenceEstimate` of ``workload``."""
    return serving_launch(est.config, input_len=workload.input_len, output_len=workload.output_len,
                          batch_per_replica=est.batch_per_replica, kv_dtype=est.kv_dtype, dtype=workload.dtype,
                          prefill_tokens=prefill_tokens, model=model)
