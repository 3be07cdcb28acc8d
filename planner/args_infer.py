"""The serving arguments (``--mode infer`` and the engine's load), one group of :mod:`planner.args`."""

from __future__ import annotations

import argparse

from costmodel.physics.kernels.kvcache import KV_DTYPES
from costmodel.spec.workload import MODES

from .arg_types import _latency_ms, choice_arg, float_arg, int_arg


def add_inference_args(parser: argparse.ArgumentParser, *, targets: bool = True, engine: bool = False) -> None:
    """``--mode {train,infer} --input-len --output-len --kv-dtype --prefill-tokens [--ttft-ms --tpot-ms]``;
    ``engine``: also ``--engine --max-seqs --request-rate --arrival-cv`` (the serving engine's scheduler and load)."""
    g = parser.add_argument_group("inference (--mode infer)")
    g.add_argument(
        "--mode",
        type=choice_arg("mode", MODES),
        default="train",
        metavar="{" + ",".join(MODES) + "}",
        help="train: one training step; infer: serving (default: %(default)s)",
    )
    g.add_argument("--input-len", type=int_arg("input_len"), metavar="N", help="prompt tokens per request")
    g.add_argument("--output-len", type=int_arg("output_len"), metavar="N", help="generated tokens per request")
    g.add_argument(
        "--kv-dtype",
        type=choice_arg("kv_dtype", KV_DTYPES),
        metavar="{" + ",".join(KV_DTYPES) + "}",
        help="KV-cache format (default: bf16)",
    )
    g.add_argument(
        "--prefill-tokens",
        type=int_arg("prefill_tokens"),
        metavar="N",
        help="step token budget of the engine (vLLM --max-num-batched-tokens, SGLang "
        "--chunked-prefill-size, TensorRT-LLM --max_num_tokens; default: the engine's, "
        "8192 on an H100)",
    )
    if engine:
        from costmodel.serving.engines import ENGINE_NAMES

        g.add_argument(
            "--engine",
            type=choice_arg("engine", ENGINE_NAMES),
            metavar="{" + ",".join(ENGINE_NAMES) + "}",
            help="serving engine whose scheduler runs the requests (default: vllm)",
        )
        g.add_argument(
            "--max-seqs",
            type=int_arg("max_seqs"),
            metavar="N",
            help="running requests at most per replica (--max-num-seqs / --max-running-requests / "
            "--max_batch_size; default: the engine's)",
        )
        g.add_argument(
            "--request-rate",
            type=float_arg("request_rate", 1e-9),
            metavar="R",
            help="Poisson arrivals at R requests/s over all replicas instead of a closed loop of "
            "--global-batch clients",
        )
        g.add_argument(
            "--arrival-cv",
            type=float_arg("arrival_cv", 1e-6),
            metavar="CV",
            help="with --request-rate: Gamma-distributed gaps between arrivals with this coefficient "
            "of variation (burstiness; 1 = Poisson, the default; > 1 burstier)",
        )
        add_speculation_args(g)
    if targets:
        g.add_argument(
            "--ttft-ms",
            type=_latency_ms("ttft_ms", 1.0),
            metavar="MS",
            help="time-to-first-token target in milliseconds",
        )
        g.add_argument(
            "--tpot-ms",
            type=_latency_ms("tpot_ms", 0.1),
            metavar="MS",
            help="time-per-output-token target in milliseconds",
        )


def add_speculation_args(g) -> None:
    """``--spec-tokens K --spec-accept A --spec-method {mtp,eagle}``: speculative decoding
    (:mod:`costmodel.serving.speculative`)."""
    from costmodel.serving.speculative import MAX_TOKENS, METHODS, MTP_ACCEPTANCE

    g.add_argument(
        "--spec-tokens",
        type=int_arg("spec_tokens"),
        metavar="K",
        help=f"speculative decoding: K draft tokens a step (1-{MAX_TOKENS}), verified in one pass of the model",
    )
    g.add_argument(
        "--spec-accept",
        type=float_arg("spec_accept"),
        metavar="A",
        help="with --spec-tokens: each draft token's acceptance rate, in [0, 1) (the workload's; default "
        f"{MTP_ACCEPTANCE:g} for a model's own MTP module, DeepSeek-V3's reported low end; none for EAGLE)",
    )
    g.add_argument(
        "--spec-method",
        type=choice_arg("spec_method", METHODS),
        metavar="{" + ",".join(METHODS) + "}",
        help="with --spec-tokens: the draft, the model's multi-token-prediction module (default where it has one) "
        "or an EAGLE head",
    )
