"""Argparse helpers shared by every subcommand.

Errors are exceptions, never argparse's "usage + exit 2": a bad value raises the
:class:`~costmodel.spec.errors.SpecError` of its converter (field, value, allowed), and argparse's
own complaints (unknown option, missing value, unknown subcommand) become a SpecError naming
the option. :func:`planner.cli.main` turns any of them into exit code 2 and one stderr line.

>>> from planner.arg_types import ArgParser
>>> from planner.flags import config_from_args
>>> p = ArgParser(prog="t"); add_problem_args(p); add_config_args(p)
>>> a = p.parse_args("--model gpt3-175b --cluster a100-80g --gpus 64 --global-batch 64 --seq 2048 --tp 8 --pp 4".split())
>>> config_from_args(a, a.gpus).dp
2
>>> p.parse_args(["--gpus", "0"])
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: gpus=0: must be a positive integer
"""

from __future__ import annotations

import argparse

from costmodel.spec.plan_checks import (
    CP_IMPLS,
    EP_DISPATCHERS,
    GRAD_DTYPES,
    LOSS_IMPLS,
    MODULE_LAYOUTS,
    OFFLOAD_MODULES,
    OPTIMIZER_DTYPES,
    PP_GRAD_REDUCES,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SP_SAVED_INPUTS,
)
from costmodel.physics.kernels.flops import CONVENTIONS, DEFAULT_CONVENTION
from costmodel.spec.plan_checks import FRAMEWORKS
from costmodel.frameworks.stacks import DEFAULT_STACK, KERNEL_SOURCES, STACKS
from costmodel.spec.units import DTYPES
from .arg_types import _converter, int_arg, float_arg, choice_arg, dma_arg
from .args_infer import add_inference_args  # noqa: F401  (planner.args is where commands find every group)


# --------------------------------------------------------------------------- argument groups
def add_problem_args(parser: argparse.ArgumentParser, *, required: bool = True, infer: bool = False) -> None:
    """``--model --cluster --gpus --global-batch --seq --dtype`` (the first four, minus --gpus, required).

    ``infer=True`` (commands that also serve, with :func:`add_inference_args`): ``--global-batch``
    and ``--seq`` are checked per mode by :func:`problem_from_args` instead of by argparse.
    """
    g = parser.add_argument_group("problem")
    g.add_argument(
        "--model",
        required=required,
        metavar="NAME|FILE",
        help="model preset (see `planner presets`), JSON/YAML spec or HF config.json",
    )
    g.add_argument(
        "--cluster",
        required=required,
        metavar="NAME|FILE",
        help="cluster preset or JSON/YAML spec (human units: GB/s, TFLOP/s, GiB, us)",
    )
    g.add_argument("--gpus", type=int_arg("gpus"), metavar="N", help="total GPUs (default: tp*pp*dp*cp)")
    g.add_argument(
        "--global-batch",
        type=int_arg("global_batch"),
        required=required and not infer,
        metavar="B",
        help="sequences per optimizer step"
        + ("; with --mode infer: concurrent requests over all replicas (default: one per replica)" if infer else ""),
    )
    g.add_argument(
        "--seq",
        type=int_arg("seq"),
        required=required and not infer,
        metavar="S",
        help="tokens per sequence" + (" (training only)" if infer else ""),
    )
    g.add_argument(
        "--mtp-layers",
        type=int_arg("mtp_layers", 0),
        metavar="N",
        help="multi-token-prediction modules trained with the model (Megatron --mtp-num-layers; "
        "default: the model's, e.g. 1 for deepseek-v3; 0: off)",
    )
    g.add_argument(
        "--moe-capacity-factor",
        type=float_arg("moe_capacity_factor"),
        metavar="C",
        help="MoE token dropping: an expert takes at most C times its mean token count (Megatron "
        "--moe-expert-capacity-factor; default: dropless)",
    )
    g.add_argument(
        "--moe-pad-to-capacity",
        action="store_true",
        default=None,
        help="pad every expert's input to its capacity (Megatron --moe-pad-expert-input-to-capacity: static "
        "shapes, no host sync; needs --moe-capacity-factor)",
    )
    g.add_argument(
        "--dtype",
        type=_converter("dtype", _dtypes, "one of " + ", ".join(DTYPES) + ", or (recommend) auto or a comma list"),
        default="bf16",
        metavar="{" + ",".join(DTYPES) + "}",
        help="GEMM format or precision recipe (default: %(default)s; fp8 is per-tensor delayed scaling; "
        "mxfp8 and nvfp4 need Blackwell); recommend also takes auto (every recipe the GPU runs) or a comma "
        "list, searches each and states each one's step time",
    )
    g.add_argument(
        "--stack",
        type=choice_arg("stack", STACKS),
        default=None,
        metavar="{" + ",".join(STACKS) + "}",
        help=f"the software stack the plan runs on: its attention kernel, element-wise kernels and "
        f"framework (costmodel.frameworks.stacks; default {DEFAULT_STACK}, the current NVIDIA stack)",
    )
    g.add_argument(
        "--kernels",
        type=choice_arg("kernels", KERNEL_SOURCES),
        default="fitted",
        metavar="{" + ",".join(KERNEL_SOURCES) + "}",
        help="how single GEMMs are timed: 'fitted' (the GEMM efficiencies fitted to published step times, the "
        "default) or 'measured' (the stack's measured GEMM table at sustained clocks, "
        "costmodel.physics.kernels.measured; benchmarks/kernel_regimes.py compares them)",
    )


def _dtypes(text: str) -> str:
    """``--dtype``: one of :data:`DTYPES`, ``auto``, or a comma list of them (recommend searches each)."""
    names = [t.strip() for t in text.split(",")]
    if text != "auto" and (not all(n in DTYPES for n in names) or len(set(names)) != len(names)):
        raise KeyError(text)
    return ",".join(names)


def _module_list(text: str) -> tuple[str, ...]:
    """``--recompute-modules layernorm,moe`` -> ``("layernorm", "moe")``; ValueError for an unknown or no module."""
    mods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not mods or any(m not in RECOMPUTE_MODULES for m in mods):
        raise ValueError(text)
    return mods


def _offload_list(text: str) -> tuple[str, ...]:
    """``--offload-modules expert_fc1,moe_act`` -> a tuple; ValueError for an unknown or no module."""
    mods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not mods or any(m not in OFFLOAD_MODULES for m in mods):
        raise ValueError(text)
    return mods


def add_config_args(parser: argparse.ArgumentParser, dispatcher: bool = False) -> None:
    """The parallel plan: ``--tp --pp --dp --ep --cp --vp --mb --sp/--no-sp --zero --recompute ...``;
    ``dispatcher``: also ``--ep-dispatcher`` and ``--cp-impl`` (evaluate, explain, recommend)."""
    g = parser.add_argument_group("parallel config (unset: 1 / off; dp = gpus/(tp*pp*cp))")
    for flag, what in (("tp", "tensor"), ("pp", "pipeline"), ("dp", "data"), ("ep", "expert"), ("cp", "context")):
        g.add_argument(f"--{flag}", type=int_arg(flag), metavar="N", help=f"{what}-parallel degree")
    g.add_argument("--vp", type=int_arg("vp"), metavar="N", help="interleaved pipeline chunks per stage")
    g.add_argument("--mb", type=int_arg("mb"), metavar="N", help="micro-batch size in sequences")
    g.add_argument(
        "--sp", action=argparse.BooleanOptionalAction, default=None, help="Megatron sequence parallelism (needs tp > 1)"
    )
    g.add_argument(
        "--zero",
        type=_converter("zero", int, "one of 0, 1, 2, 3", lambda v: v in (0, 1, 2, 3)),
        metavar="{0,1,2,3}",
        help="ZeRO stage (1 = distributed optimizer)",
    )
    g.add_argument(
        "--recompute",
        type=choice_arg("recompute", RECOMPUTE),
        metavar="{" + ",".join(RECOMPUTE) + "}",
        help="activation recomputation",
    )
    g.add_argument(
        "--recompute-layers",
        type=int_arg("recompute_layers", 0),
        metavar="N",
        help="with --recompute full: layers per stage recomputed (default: all)",
    )
    g.add_argument(
        "--bucket-mb",
        type=float_arg("bucket_mb"),
        metavar="MB",
        help="DP gradient bucket size in MB (0 = no overlap; default 40)",
    )
    g.add_argument(
        "--chunks", type=int_arg("chunks"), metavar="N", help="pieces each overlappable collective is split into"
    )
    g.add_argument(
        "--framework",
        type=choice_arg("framework", FRAMEWORKS),
        metavar="{" + ",".join(FRAMEWORKS) + "}",
        help="framework that runs the plan: its ZeRO semantics are charged, only what it can run is "
        "searched, --emit prints it (default: megatron)",
    )
    g.add_argument(
        "--grad-dtype",
        type=choice_arg("grad_dtype", GRAD_DTYPES),
        metavar="{" + ",".join(GRAD_DTYPES) + "}",
        help="dtype gradients are accumulated and reduced in over data parallelism (default fp32, "
        "Megatron's for BF16 runs; bf16 is --grad-reduce-in-bf16); recommend plans every "
        "candidate with it",
    )
    add_memory_args(g)
    g.add_argument(
        "--module-layout",
        type=choice_arg("module_layout", MODULE_LAYOUTS),
        metavar="{" + ",".join(MODULE_LAYOUTS) + "}",
        help="the model code's layer modules: fused (Megatron / Megatron-DeepSpeed: one QKV and one "
        "gate/up projection, the default) or hf (Hugging Face: Q, K, V and gate, up apart); sets "
        "DeepSpeed ZeRO-3's per-module fetches and reduce buckets",
    )
    if dispatcher:
        g.add_argument(
            "--ep-dispatcher",
            type=choice_arg("ep_dispatcher", EP_DISPATCHERS),
            metavar="{" + ",".join(EP_DISPATCHERS) + "}",
            help="how MoE tokens reach their experts: alltoall (Megatron --moe-token-dispatcher-type "
            "alltoall, the default), deepep (flex dispatcher, DeepEP backend: one network copy "
            "per destination node) or hybridep (flex dispatcher, HybridEP backend: one network copy per "
            "destination NVLink domain, 72 GPUs on GB200/GB300 NVL72)",
        )
        g.add_argument(
            "--cp-impl",
            type=choice_arg("cp_impl", CP_IMPLS),
            metavar="{" + ",".join(CP_IMPLS) + "}",
            help="how context parallelism exchanges K/V: ring (Transformer Engine's ring attention, as Megatron-Core "
            "and NeMo AutoModel run it; the default) or torch (PyTorch's context_parallel, as torchtitan runs it; "
            "the default with --emit fsdp2; needs --framework fsdp2)",
        )
    g.add_argument(
        "--ep-overlap",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hide the MoE all-to-alls behind another micro-batch's compute (Megatron-Core "
        "--overlap-moe-expert-parallel-comm, its combined 1F1B schedule: one more forward in flight; needs ep > 1, "
        "no full recompute, vp >= 2 with pp > 1); recommend plans every EP plan with it where Megatron runs it",
    )
    g.add_argument(
        "--dma",
        type=dma_arg,
        metavar="STREAMS:CLASS*N,...",
        help="DMA engines of each communication stream (tp cp ep pp dp zero), e.g. "
        "'tp:cdma*2,dp:cdma*1,pp:cdma*1'; 'tp+dp:cdma*1' shares one engine "
        "(default: the engines split evenly; see costmodel.physics.comm.dma)",
    )
    g.add_argument(
        "--no-flash-attention",
        dest="flash_attention",
        action="store_false",
        default=None,
        help="unfused attention that stores the s x s scores (Megatron-LM 2021/22)",
    )
    add_split_args(parser)


def _layer_counts(text: str) -> tuple[int, ...]:
    counts = tuple(int(x) for x in text.split(","))
    if not counts or min(counts) < 1:
        raise ValueError(text)
    return counts


def add_split_args(parser: argparse.ArgumentParser) -> None:
    """Uneven pipeline stages: ``--layers-per-stage a,b,...`` or Megatron-Core's first/last or
    account-for-embedding/loss rules (:func:`planner.problem.stage_split`)."""
    g = parser.add_argument_group("pipeline stages (unset: even; one way at a time)")
    g.add_argument(
        "--layers-per-stage",
        type=_converter(
            "layers_per_stage", _layer_counts, "comma-separated integers >= 1, one per stage (e.g. 7,8,8,7)"
        ),
        metavar="A,B,...",
        help="transformer layers on each pipeline stage, first to last (sets pp)",
    )
    g.add_argument(
        "--first-stage-layers",
        type=int_arg("first_stage_layers"),
        metavar="N",
        help="layers on the first stage (Megatron --decoder-first-pipeline-num-layers)",
    )
    g.add_argument(
        "--last-stage-layers",
        type=int_arg("last_stage_layers"),
        metavar="N",
        help="layers on the last stage (Megatron --decoder-last-pipeline-num-layers)",
    )
    g.add_argument(
        "--account-for-embedding",
        action="store_true",
        default=None,
        help="the embedding counts as a layer (Megatron --account-for-embedding-in-pipeline-split)",
    )
    g.add_argument(
        "--account-for-loss",
        action="store_true",
        default=None,
        help="the loss counts as a layer (Megatron --account-for-loss-in-pipeline-split)",
    )
    g.add_argument(
        "--layout",
        metavar="TEXT",
        help='the pipeline layout (Megatron --pipeline-model-parallel-layout, e.g. "Et*3|(tt|)*29|L": '
        "virtual stages split by |, E embedding, t decoder layer, L loss; sets vp; needs --pp). "
        "Unset and the layers not divisible by pp*vp: evaluate chooses the best layout",
    )


def add_flop_args(parser: argparse.ArgumentParser) -> None:
    """``--mfu-convention {causal,full}``: how MFU, HFU and model TFLOP/s count attention."""
    parser.add_argument(
        "--mfu-convention",
        type=choice_arg("mfu_convention", tuple(CONVENTIONS)),
        default=DEFAULT_CONVENTION,
        metavar="{" + ",".join(CONVENTIONS) + "}",
        help="count the attention core of MFU/HFU causally (half the s x s scores, as Megatron-LM's "
        "num_floating_point_operations does; the default) or in full (Korthikanti et al. 2023, "
        "Narayanan et al. 2021 Eq. 3); the step time is the same",
    )


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--json``: one JSON object on stdout and nothing else there."""
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def add_memory_args(g) -> None:
    """The plan's memory mechanisms (:data:`MEMORY_FIELDS`), each a Megatron-LM flag of the same meaning where
    Megatron has one (``--emit megatron`` prints it, :mod:`planner.megatron_args` reads it back)."""
    g.add_argument(
        "--recompute-modules",
        nargs="+",
        metavar="M",
        type=_converter(
            "recompute_modules", _module_list, f"modules (space- or comma-separated) of {', '.join(RECOMPUTE_MODULES)}"
        ),
        help="with --recompute selective under Megatron: the modules recomputed "
        f"({', '.join(RECOMPUTE_MODULES)}; Megatron's --recompute-modules; default core_attn)",
    )
    g.add_argument(
        "--fp8-param-gather",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="FP8 parameters, no cached FP8 weight copy, FP8 parameter all-gather (Megatron "
        "--fp8-param-gather; --dtype fp8 with the distributed optimizer or Megatron FSDP); recommend "
        "chooses it for FP8 Megatron plans unless --no-fp8-param-gather",
    )
    g.add_argument(
        "--optimizer-dtype",
        type=choice_arg("optimizer_dtype", OPTIMIZER_DTYPES),
        metavar="{" + ",".join(OPTIMIZER_DTYPES) + "}",
        help="fp32: an FP32 master copy and Adam moments (default); bf16: a BF16 model updated in place "
        "with BF16 Adam moments (framework fsdp2: torch.optim.Adam; framework megatron with zero 1: "
        "NeMo's distributed_fused_adam with optim.dtype bf16)",
    )
    g.add_argument(
        "--loss-impl",
        type=choice_arg("loss_impl", LOSS_IMPLS),
        metavar="{" + ",".join(LOSS_IMPLS) + "}",
        help="the cross-entropy's memory: fused (Megatron-Core's vocab-parallel cross-entropy, the "
        "default), fp32 (torchtitan's eager FP32 loss) or te (Transformer Engine's cross-entropy, Megatron-Core "
        "--cross-entropy-fusion-impl te: the gradient overwrites the logits)",
    )

    g.add_argument(
        "--pp-grad-reduce",
        type=choice_arg("pp_grad_reduce", PP_GRAD_REDUCES),
        metavar="{" + ",".join(PP_GRAD_REDUCES) + "}",
        help="framework fsdp2, zero 2, with pp > 1: step (torch.distributed.pipelining: gradients kept "
        "unsharded and reduce-scattered once per step, the default) or microbatch (reduce-scattered "
        "in every micro-batch's backward, parameters gathered in each forward: ZeRO-2 under PP, as "
        "Meta's FSDP ran Llama 3)",
    )
    g.add_argument(
        "--sp-saved-inputs",
        type=choice_arg("sp_saved_inputs", SP_SAVED_INPUTS),
        metavar="{" + ",".join(SP_SAVED_INPUTS) + "}",
        help="under sequence parallelism, what the QKV and MLP GEMMs save of their all-gathered input: "
        "sharded (Megatron-Core, gathered again in backward) or gathered (PyTorch DTensor TP, "
        "torchtitan; framework fsdp2 only); default: the framework's own",
    )
    g.add_argument(
        "--pp-free-stage-inputs",
        action="store_true",
        default=None,
        help="with pp > 1: each model chunk frees its received input after its forward (Llama 3's "
        "pipeline, arXiv 2407.21783 section 3.3.2); no emitted framework runs it",
    )
    g.add_argument(
        "--optimizer-offload-fraction",
        metavar="F",
        type=_converter("optimizer_offload_fraction", float, "a number from 0 to 1", lambda v: 0.0 <= v <= 1.0),
        help="optimizer CPU offload (Megatron --optimizer-cpu-offload --optimizer-offload-fraction F, "
        "with the distributed optimizer, --zero 1): F of the FP32 master weights and Adam moments on "
        "the host, stepped by the CPU, with the PCIe copies charged; recommend: every plan offloads "
        "F (without it, recommend offers F = 0.5 and 1, overlapped, only when no plan fits)",
    )
    g.add_argument(
        "--activation-offload-layers",
        metavar="N",
        type=_converter("activation_offload_layers", int, "an integer >= 0", lambda v: v >= 0),
        help="activation CPU offload (Megatron --cpu-offloading-num-layers N): the saved activations "
        "of the first N layers copied to the host in forward and back in backward, the PCIe copies "
        "charged where Transformer Engine's schedule (at most L - N layers' activations on the GPU) "
        "cannot hide them; Megatron refuses it with pp > 1 or recompute; recommend: every plan "
        "offloads N at pp=1 without recompute (unstated, recommend looks for it where no plan fits or "
        "the answer recomputes at pp=1)",
    )
    g.add_argument(
        "--fine-grained-activation-offloading",
        action="store_true",
        default=None,
        help="with --offload-modules: Megatron-Core's module-level activation offload (evaluate and explain; "
        "not searched)",
    )
    g.add_argument(
        "--offload-modules",
        nargs="+",
        metavar="M",
        type=_converter(
            "offload_modules",
            _offload_list,
            f"modules (space- or comma-separated) of {', '.join(OFFLOAD_MODULES)} (Megatron's other choices are "
            "not modelled)",
        ),
        help="with --fine-grained-activation-offloading: the MoE expert modules whose saved inputs go to the host "
        "after their forward and come back before their backward (Megatron --offload-modules), the host-link "
        "copies charged where they do not hide",
    )
    g.add_argument(
        "--overlap-cpu-optimizer-d2h-h2d",
        action="store_true",
        default=None,
        help="with --optimizer-offload-fraction: pipeline the gradient copy, CPU Adam and parameter copy "
        "(Megatron --overlap-cpu-optimizer-d2h-h2d)",
    )
