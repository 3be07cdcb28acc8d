"""The software stack a plan runs on: framework family and era, attention kernel, element-wise kernels.

The same plan on the same GPUs runs up to 20% apart across framework and kernel-library versions,
so a stack is an input beside the hardware (DESIGN.md, "The software stack is an input"). A
:class:`Stack` names what each family runs by default, each setting from its own source; the
kernel constants it changes are applied to the cluster's device (:func:`apply_stack`) and its
framework mechanics become the plan's defaults (:func:`stack_config`). A stated flag always wins
over the stack's default. The cluster records the stack it was prepared for
(``ClusterSpec.stack``), so every report can name it.

What a stack does *not* set yet: GEMM efficiencies per library version. They are the device's,
fitted per device family and dtype (``benchmarks/calibrate.py``); ``planner calibrate`` fits a
user's own stack.

>>> load_stack("torchtitan-2024").attention
'fa2'
>>> load_stack("mcore-2026")
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: stack='mcore-2026': must be one of mcore-2025, megatron-lm-2021, torchtitan-2024, deepspeed-2022
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, DeviceSpec

#: attention kernels a stack runs: ``fused`` (the cuDNN-class fused attention of Transformer Engine:
#: the presets' ``attention_efficiency``), ``fa2`` (FlashAttention-2, :func:`costmodel.frameworks.stacks.fa2_device`),
#: ``unfused`` (softmax over the stored s x s scores: ``ParallelConfig.flash_attention=False``)
ATTENTION = ("fused", "fa2", "unfused")


@dataclass(frozen=True, kw_only=True)
class Stack:
    """One software stack.

    name : the ``--stack`` value. title : what it is, in words (printed with every result).
    framework : the framework that runs the plan (:mod:`costmodel.frameworks.rules`).
    attention : the attention kernel, one of :data:`ATTENTION`.
    fused_elementwise : norms, rotary embedding and gated activations run fused (False: PyTorch
        eager, one kernel per operator; :func:`costmodel.physics.kernels.compute.layer_ops`).
    source : where each setting is read from.
    era : ``(knob, value)`` pairs the framework version runs because it has nothing else (a knob it
        lacks, e.g. no distributed optimizer: ``zero`` 0), set unless the user states the knob
        (:func:`era_pins`); ``lacks_recompute`` the recomputation kinds it does not have (not searched
        unless stated); ``even_stages`` every pipeline stage and model chunk holds the same layer count (the
        search tries no other split: ``Limits.uneven_stages``). era_source : where those are read from.
    gemm_table : the measured GEMM table that stands nearest to the stack's GEMM library
        (:mod:`costmodel.physics.tables`: ``trtllm``, ``vllm`` or ``sglang``), read with ``--kernels measured``
        (:func:`with_measured_kernels`); gemm_table_source : why that one.
    """

    name: str
    title: str
    framework: str
    attention: str
    fused_elementwise: bool
    source: str
    era: tuple = ()
    lacks_recompute: tuple = ()
    even_stages: bool = False
    era_source: str = ""
    gemm_table: str = "trtllm"
    gemm_table_source: str = (
        "Transformer Engine's GEMMs are cuBLASLt calls (transformer_engine/common/gemm/cublaslt_gemm.cu); no table "
        "measures Transformer Engine itself, and AIConfigurator's TensorRT-LLM GEMM table (its cuBLASLt / CUTLASS "
        "linear path) stands nearest"
    )

    def __post_init__(self):
        if self.attention not in ATTENTION:
            raise SpecError("stack.attention", self.attention, f"one of {', '.join(ATTENTION)}")


STACKS = {
    s.name: s
    for s in (
        Stack(
            name="mcore-2025",
            title="Megatron-Core 0.12+ / NeMo 25.x / Megatron-Bridge, Transformer Engine 2.x (cuDNN fused attention, "
            "fused element-wise kernels)",
            framework="megatron",
            attention="fused",
            fused_elementwise=True,
            source="Transformer Engine's DotProductAttention selects the cuDNN fused-attention backend on Hopper and "
            "Blackwell (transformer_engine/pytorch/attention: get_attention_backend); Megatron-Core's "
            "--attention-backend auto defers to it (megatron/training/arguments.py at d98e8a64); the "
            "presets' attention_efficiency is the cuDNN kernel's (h100-sxm.json notes: FlashAttention-3 "
            "paper, arXiv 2407.08608, Figs. 5-6)",
        ),
        Stack(
            name="megatron-lm-2021",
            title="Megatron-LM 2020-2022 (before Megatron-Core): unfused softmax attention over stored scores; "
            "no distributed optimizer, sequence parallelism, overlapped gradient reduction or selective recompute",
            framework="megatron",
            attention="unfused",
            fused_elementwise=True,
            source="Korthikanti et al. 2023 (arXiv 2205.05198) Sec. 4: the 5 a s^2 b bytes of attention scores "
            "and softmax are stored; Megatron-LM gained --use-flash-attn only in 2023. Element-wise kernels fused: "
            "Megatron-LM v2.6 (3860e995, 2021-08-27) megatron/arguments.py turns bias-GeLU, bias-dropout-add and "
            "scale-mask-softmax fusion on by default (--no-bias-gelu-fusion, --no-bias-dropout-fusion, "
            "--no-masked-softmax-fusion opt out) and megatron/model/fused_layer_norm.py is apex's fused LayerNorm",
            era=(("zero", 0), ("sp", False), ("bucket_mb", 0.0), ("chunks", 1), ("cp", 1)),
            lacks_recompute=("selective",),
            even_stages=True,
            era_source="Megatron-LM v2.6 (3860e995, 2021-08-27) megatron/arguments.py has no "
            "--use-distributed-optimizer (ZeRO 0), no --sequence-parallel, no --overlap-grad-reduce (training.py "
            "train_step all-reduces the gradients after forward_backward_func: bucket 0, no overlap), no "
            "--tp-comm-overlap (1 chunk), and recomputes only whole layers (--checkpoint-activations, "
            "--activations-checkpoint-method uniform|block); the distributed optimizer, sequence parallelism "
            "and selective recompute came with Megatron-LM v3.0 in 2022 (Korthikanti et al. 2022, arXiv 2205.05198), "
            "context parallelism (--context-parallel-size) with Megatron-Core in 2023; every pipeline stage holds "
            "num_layers / pipeline size layers (megatron/model/transformer.py ParallelTransformer asserts "
            "num_layers % pipeline_model_parallel_size == 0, and the interleaved schedule an equal count per "
            "model chunk): no uneven first or last stage",
        ),
        Stack(
            name="torchtitan-2024",
            title="torchtitan (PyTorch FSDP2), SDPA flash attention (FlashAttention-2), eager element-wise ops "
            "(training.compile = false)",
            framework="fsdp2",
            attention="fa2",
            fused_elementwise=False,
            source="torchtitan models/llama/model.py at 327b72b: F.scaled_dot_product_attention, whose flash "
            "backend is FlashAttention-2; train_configs/*.toml: compile = false",
            gemm_table="vllm",
            gemm_table_source="eager PyTorch nn.Linear runs torch.matmul (cuBLAS); AIConfigurator's vLLM GEMM table "
            "times vLLM's unquantized linear layers, which are the same torch.nn.functional.linear calls",
        ),
        Stack(
            name="deepspeed-2022",
            title="DeepSpeed with Megatron-DeepSpeed (2021-2022): unfused softmax attention",
            framework="deepspeed",
            attention="unfused",
            fused_elementwise=True,
            source="Megatron-DeepSpeed of the MT-NLG / BLOOM era forks Megatron-LM 2021 (fused scale-mask-softmax "
            "over stored scores, no flash attention)",
        ),
    )
}
#: the default: the current NVIDIA stack
DEFAULT_STACK = "mcore-2025"


def load_stack(name: str | Stack) -> Stack:
    """The :class:`Stack` named ``name`` (a Stack is returned as it is)."""
    if isinstance(name, Stack):
        return name
    if name not in STACKS:
        raise SpecError(
            "stack", name if len(str(name)) <= 60 else str(name)[:57] + "...", f"one of {', '.join(STACKS)}"
        )
    return STACKS[name]


def apply_stack(stack: str | Stack, cluster: ClusterSpec) -> ClusterSpec:
    """``cluster`` with the stack's kernel constants on its device and its name recorded.

    >>> from costmodel.spec.presets import load_cluster
    >>> h = load_cluster("h100-sxm")
    >>> t = apply_stack("torchtitan-2024", h)
    >>> (t.stack, round(t.device.attention_efficiency / h.device.attention_efficiency, 2))
    ('torchtitan-2024', 0.62)
    >>> apply_stack("mcore-2025", h) == h
    True
    """
    s = load_stack(stack)
    base = cluster
    if cluster.stack != DEFAULT_STACK and cluster.stack != s.name:
        raise SpecError(
            "stack",
            s.name,
            f"{cluster.stack} (the cluster was already prepared for stack {cluster.stack}; start from the preset)",
        )
    device = fa2_device(base.device) if s.attention == "fa2" and cluster.stack != s.name else base.device
    return replace(base, device=device, stack=s.name)


#: what ``--kernels`` may say: ``fitted`` (the GEMM efficiencies fitted to step times, the default) or ``measured``
#: (the stack's measured GEMM table at sustained clocks, :mod:`costmodel.physics.kernels.measured`)
KERNEL_SOURCES = ("fitted", "measured")


def with_measured_kernels(stack: str | Stack, cluster: ClusterSpec) -> ClusterSpec:
    """``cluster`` whose single GEMMs are timed from the stack's measured GEMM table (:attr:`Stack.gemm_table`).

    >>> from costmodel.spec.presets import load_cluster
    >>> with_measured_kernels("torchtitan-2024", load_cluster("h100-sxm")).device.kernel_table
    'vllm'
    """
    return replace(cluster, device=replace(cluster.device, kernel_table=load_stack(stack).gemm_table))


def stack_config(stack: str | Stack) -> dict:
    """The plan defaults the stack runs: ``framework``, ``flash_attention``, ``fused_elementwise``."""
    s = load_stack(stack)
    return {
        "framework": s.framework,
        "flash_attention": s.attention != "unfused",
        "fused_elementwise": s.fused_elementwise,
    }


def era_pins(stack: str | Stack) -> dict:
    """``{knob: value}`` the stack's framework version runs for lack of anything else (:attr:`Stack.era`),
    ``exclude`` of the recomputation kinds it lacks, and ``uneven_stages`` False where every stage holds the same
    layers: a planner input sets each only where the user states nothing for it
    (``planner.flags.constraints_from_args``, ``config_from_args``; ``exclude`` and ``uneven_stages`` are
    search limits, not plan fields).

    >>> era_pins("megatron-lm-2021")["zero"], era_pins("megatron-lm-2021")["exclude"], era_pins("mcore-2025")
    (0, {'recompute': ('selective',)}, {})
    >>> era_pins("megatron-lm-2021")["cp"], era_pins("megatron-lm-2021")["uneven_stages"]
    (1, False)
    """
    s = load_stack(stack)
    out = dict(s.era)
    if s.lacks_recompute:
        out["exclude"] = {"recompute": tuple(s.lacks_recompute)}
    if s.even_stages:
        out["uneven_stages"] = False
    return out


#: FlashAttention-2's throughput over the cuDNN fused-attention kernel's on Hopper (H100 SXM5, head dim
#: 128, causal, 8k-16k tokens: forward 333-335 against 529-539 TFLOP/s, backward 318-322 against 516-518;
#: Shah et al. 2024, "FlashAttention-3", arXiv 2407.08608, Figures 5 and 6): 0.62 in both directions. A
#: Hopper preset's ``attention_efficiency`` is that of the cuDNN/FlashAttention-3-class kernel (Transformer
#: Engine's fused attention); a software stack that runs FlashAttention-2 there (PyTorch SDPA's flash
#: backend, the flash-attn 2 package) reaches this fraction of it.
FA2_HOPPER_RATIO = 0.62


HOPPER = ("H100", "H200", "H800")


def fa2_device(dev: DeviceSpec) -> DeviceSpec:
    """``dev`` as a FlashAttention-2 stack sees it: on Hopper, attention at :data:`FA2_HOPPER_RATIO` of the
    preset's (cuDNN-class) attention efficiency; other devices unchanged (FA2 is their native kernel)."""
    if not any(h in dev.name for h in HOPPER):
        return dev
    return replace(dev, attention_efficiency=dev.attention_efficiency * FA2_HOPPER_RATIO)


def tp_from_nccl_tables(w, c, head: bool = False) -> bool | None:
    """``tables`` for a TP/SP collective of plan ``c`` under workload ``w`` (issue 38, the rule that put training's
    EP all-to-all on the tables: where the framework runs the table's protocol, the measurement replaces the
    formula). True in training without TP communication overlap (``chunks == 1``): Megatron-Core's TP all-reduce
    and SP all-gather / reduce-scatter are ``torch.distributed`` NCCL calls, out of place on the compute stream
    (``megatron/core/tensor_parallel/mappings.py``), as are torchtitan's DTensor collectives, which is what
    nccl-tests times. None (the default rule) where Transformer Engine's userbuffers carry TP (``chunks > 1``,
    ``--tp-comm-overlap``: peer-to-peer ring exchanges on registered buffers that no table measures) and in
    serving (engines run their own all-reduce: :mod:`costmodel.serving.engines`); the formula and the tables are
    :func:`costmodel.physics.comm.collectives.collective_time_s`'s ``tables``. ``head``: the LM head's input-gradient
    reduction, Megatron-Core's own ``ColumnParallelLinear`` (``torch.distributed``, not a Transformer Engine
    module), is NCCL under ``--tp-comm-overlap`` too."""
    return True if w.mode != "infer" and (head or c.chunks == 1) else None
