"""The parallel plan (:class:`ParallelConfig`) and the rules that tie it to a model, cluster and workload.

Degrees follow Megatron-LM: ``tp * pp * dp * cp = GPUs``; expert parallelism is folded
inside the data- and tensor-parallel ranks (``ep`` divides ``tp * dp * cp``), and an expert
is not split further by TP when ``ep > 1`` (Megatron-Core ``--expert-tensor-parallel-size 1``).

>>> ParallelConfig(tp=8, pp=8, dp=2, mb=1).to_dict()["bucket_mb"]
40.0
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from costmodel.spec import dma_plan as _dma
from costmodel.spec import layout as _layout
from costmodel.spec.errors import SpecError
from costmodel.spec.workload import Workload
from costmodel.spec.bounds import _positive_int

from costmodel.spec.plan_checks import check_fields
from costmodel.spec.units import MB

CONFIG_KEYS = ("tp", "pp", "dp", "ep", "cp", "vp", "mb", "sp", "zero", "recompute", "bucket_mb", "chunks")


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    """A parallel plan.

    Attributes
    ----------
    tp, pp, dp, ep, cp : tensor, pipeline, data, expert and context parallel degrees (1 = off).
    sp : Megatron sequence parallelism (TP AllReduce split into AllGather + ReduceScatter).
    zero : ZeRO stage 0-3 (1 = Megatron's distributed optimizer; 3 = fully sharded parameters).
    recompute : ``none``, ``selective`` (attention core, Korthikanti et al. 2023), ``full``, or
        ``op_sac``: torchtitan's per-op selective activation checkpointing
        (``selective_ac_option = 'op'``; FSDP2 only): backward replays every element-wise op, every
        second matmul and, under sequence parallelism, the all-gathers in front of the column-parallel
        matmuls (:func:`costmodel.physics.kernels.recompute.op_sac_fractions`).
    recompute_layers : with ``full``, layers per pipeline stage that are recomputed
        (``None`` = all of them).
    recompute_modules : with ``selective`` under Megatron-Core, the ``--recompute-modules`` (a tuple from
        :data:`costmodel.spec.plan_checks.RECOMPUTE_MODULES`; ``None`` = Megatron's default, the core attention alone).
    fp8_param_gather : Megatron-Core ``--fp8-param-gather``: FP8 training keeps its weights as FP8
        parameters (no separate FP8 copy beside BF16 weights; :func:`costmodel.physics.memory.stage_memory.fp8_weight_cache_bytes`).
        Needs the distributed optimizer or FSDP (zero >= 1).
    optimizer_dtype : the dtype of the parameters the optimizer updates and of its Adam moments:
        ``fp32`` (mixed precision, an FP32 master copy; the default) or ``bf16`` (a model built in
        BF16 and updated by ``torch.optim.Adam`` in place: no master copy, BF16 moments and sharded
        gradients; under FSDP2, e.g. NeMo AutoModel, whose ``from_config`` defaults to bfloat16; or under
        Megatron-Core with ``zero=1``, NeMo 1.x's Apex ``distributed_fused_adam`` with ``optim.dtype: bf16``:
        NeMo ``megatron_base_model.py`` sets ``store_params=False`` when the optimizer dtype is the model's,
        so Apex's ``DistributedFusedAdam`` keeps only BF16 ``exp_avg``/``exp_avg_sq`` shards and updates the
        BF16 parameters, the gradient buffer as the distributed optimizer's, ``grad_dtype``).
    optimizer_offload_fraction : Megatron-Core ``--optimizer-cpu-offload --optimizer-offload-fraction``: the
        fraction (0..1) of the distributed optimizer's local shard whose FP32 master weights and Adam moments
        live on the host and are stepped by the CPU (:mod:`costmodel.physics.mechanics.offload`); 0 = off. Needs
        framework=megatron with zero=1 and optimizer_dtype fp32.
    overlap_cpu_optimizer_d2h_h2d : Megatron-Core ``--overlap-cpu-optimizer-d2h-h2d``: the offload's
        gradient D2H, CPU Adam and parameter H2D pipelined on their own streams (false: in sequence).
    activation_offload_layers : Megatron-Core ``--cpu-offloading-num-layers N``: the saved activations of N
        transformer layers copied to the host in forward and back in backward (:mod:`costmodel.physics.mechanics.act_offload`);
        0 = off. Megatron refuses it with pp > 1, with any recompute and with N >= the model's layers.
    offload_modules : Megatron-Core ``--fine-grained-activation-offloading --offload-modules M ...``: the saved
        inputs of the named MoE expert modules (a tuple from :data:`costmodel.spec.plan_checks.OFFLOAD_MODULES`)
        copied to the host after each one's forward and back before its backward
        (:mod:`costmodel.physics.mechanics.fg_offload`); ``None`` = off.
    mb : micro-batch size in sequences. vp : interleaved pipeline chunks per stage (1 = plain 1F1B).
    bucket_bytes : DP gradient bucket size; 0 means no overlap (one reduction after backward).
    chunks : pieces each overlappable collective (SP AllGather/ReduceScatter, EP combine,
        CP ring) is split into so it can pipeline with compute; 1 means not chunked.
    layers_per_stage : layers on each pipeline stage, first to last (``None`` = uniform), each >= 1
        and any count (not only multiples of ``vp``); e.g. fewer layers on the first and last stage,
        which also hold the embedding and LM head. A stage's layers are split into its ``vp`` model
        chunks by :func:`costmodel.spec.stages.chunk_layers`.
    flash_attention : fused attention that never stores the s x s scores (FlashAttention);
        False reproduces Megatron-LM 2021/22's unfused softmax (Korthikanti's ``5 a s^2 b`` term).
    framework : ``megatron``, ``deepspeed`` or ``fsdp2``, the framework that runs the plan; its
        ZeRO semantics are charged and its rules checked (:mod:`costmodel.frameworks.rules`).
    fused_elementwise : the layer's element-wise ops (norms, rotary embedding, gated activation)
        run as fused kernels (Megatron-Core / Transformer Engine, or PyTorch under
        ``torch.compile``); False: PyTorch eager, one kernel per operator
        (:func:`costmodel.physics.kernels.compute.layer_ops`; torchtitan ``training.compile = false``).
    fused_norm : the norms run as one fused kernel each, whatever ``fused_elementwise`` says of the rest;
        unset: as ``fused_elementwise``. True with ``fused_elementwise=False`` is torchtitan of
        2024-04 to 2025-02 with ``model.norm_type = "fused_rmsnorm"`` (its Triton RMSNorm, which saves the
        BF16 input and the row statistics) and ``training.compile = false`` (removed in torchtitan 37c4b818).
    ep_dispatcher : how MoE tokens reach their experts: ``alltoall`` (NCCL AllToAll-V, one copy
        per routed expert) or ``deepep`` (DeepEP, one copy per destination node over the network,
        forwarded inside the node over NVLink; Megatron-Core
        ``--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep``) or ``hybridep`` (the flex
        dispatcher's HybridEP backend: the same copies per NVLink domain, the multi-node NVLink domain on
        GB200 NVL72, at its links' rates;
        :func:`costmodel.physics.comm.ep_dispatch.ep_alltoall_bytes`).
    cp_impl : how context parallelism exchanges K/V (:func:`costmodel.physics.kernels.compute.cp_exchange`): ``ring``
        (Megatron-Core / Transformer Engine: the GQA K/V shards pass rank to rank, each transfer hidden
        behind one attention block) or ``torch`` (PyTorch ``context_parallel`` as torchtitan runs it:
        K/V repeated to the query heads, all-gathered once behind the local block, dK/dV passed
        around the ring in FP32).
    fsdp_copies : under ``framework="fsdp2"``, PyTorch FSDP2 (``fully_shard``, per-parameter sharding)
        copies each gathered parameter out of the flat all-gather buffer and each gradient into the flat
        reduce-scatter buffer on the compute stream (:func:`costmodel.physics.mechanics.fsdp_copies.fsdp2_copies_s`). Unset
        (None): as the framework runs, i.e. True for ``fsdp2``. False: gathers land in a flat buffer the
        parameters are views of (FSDP1's ``FlatParameter``, Megatron FSDP, DeepSpeed ZeRO-3), no
        copies charged (published FSDP1 runs evaluated under ``fsdp2``).
    grad_dtype : the dtype gradients are accumulated in and reduced over data parallelism (bytes
        per element: :func:`costmodel.physics.memory.stage_memory.grad_elem_bytes`): ``fp32`` (the default: Megatron-LM
        with ``--accumulate-allreduce-grads-in-fp32``, which ``--bf16`` forces on; Megatron-Core
        ``grad_reduce_in_fp32``) or ``fp16`` / ``bf16`` (the model's half-precision ``.grad``: Megatron-LM
        v1 without ``--fp32-allreduce`` and v2 FP16 runs without the accumulate flag; Megatron-Core
        ``--grad-reduce-in-bf16``). It sets the gradient buffer's memory and every gradient collective.
    loss_impl : how the cross-entropy of the logits runs (:func:`costmodel.physics.memory.activations.loss_bytes_per_logit`):
        ``fused`` (the default: Megatron-Core's vocab-parallel cross-entropy, BF16 logits and an FP32
        softmax) or ``fp32`` (torchtitan through 2024: eager ``cross_entropy(pred.float(), labels)``,
        FP32 log-softmax and gradients) or ``te`` (Megatron-Core ``--cross-entropy-loss-fusion
        --cross-entropy-fusion-impl te``: Transformer Engine's cross-entropy, the gradient written over the logits).
    pp_grad_reduce : when FSDP without resharding after forward (``framework='fsdp2'``, ``zero=2``) reduces
        gradients under a pipeline schedule (:func:`costmodel.frameworks.rules.of`): ``step`` (the default:
        ``torch.distributed.pipelining`` turns gradient sync and reshard-after-backward off for every
        micro-batch but the last, so the stage's weights and FP32 gradients stay unsharded and are
        reduce-scattered once per step) or ``microbatch`` (ZeRO-2 semantics under PP: every micro-batch's
        backward reduce-scatters its gradients into the FP32 shard and the parameters are gathered again
        in its forward; Meta's FSDP for Llama 3, whose paper says it "shards optimizer states and
        gradients" and reduce-scatters them in FP32, arXiv 2407.21783 section 3.3.2). No effect with pp = 1.
    sp_saved_inputs : under sequence parallelism, what the column-parallel GEMMs (QKV, fc1) save of their
        all-gathered input for backward (:func:`costmodel.physics.memory.activations.activation_bytes_per_layer`): ``sharded``
        (Megatron-Core: the sequence-sharded input, all-gathered again in backward) or ``gathered``
        (PyTorch DTensor tensor parallelism as torchtitan applies it: ``PrepareModuleInput`` all-gathers the
        block input and ``aten.mm`` saves the gathered tensor; in FP8 under torchao's
        ``PrepareFloat8ModuleInput`` the cast precedes the gather, so it is saved in FP8). Unset (None): the
        framework's own, ``gathered`` for ``fsdp2``, ``sharded`` otherwise; ``gathered`` only with ``fsdp2``.
    pp_free_stage_inputs : under a pipeline schedule, each model chunk's input (the tensor received from the
        previous stage, which the chunk's first layer would keep as its norm input) is freed once its forward
        has run, per micro-batch in flight (:func:`costmodel.physics.memory.stage_memory.stage_memory`): Llama 3's schedule, "we
        proactively deallocate tensors that will not be used for future computation, including the input and
        output tensors of each pipeline stage" (arXiv 2407.21783 section 3.3.2). No framework the planner emits
        has it (Megatron-Core frees only the outputs, ``deallocate_pipeline_outputs``, which the activations
        never charge); no effect with ``pp = 1`` or under full recompute (the checkpoint keeps the input).
    ep_overlap : Megatron-Core's ``--overlap-moe-expert-parallel-comm``: the combined 1F1B schedule runs one
        micro-batch's forward with another's backward, layer by layer, so each MoE all-to-all hides behind
        the other micro-batch's compute (:mod:`costmodel.compose.ep_overlap`); one more forward in flight
        (``megatron/core/pipeline_parallel/schedules.py@d98e8a6``). Megatron refuses it without EP, with a
        dispatcher other than alltoall / flex, with full or layer-count recompute or ``moe`` recomputed,
        with pp > 1 and no interleaving, and with more than one MTP layer
        (``megatron/core/transformer/transformer_config.py@d98e8a6``).
    module_layout : the parameter tensors of a layer as the model code builds them
        (:func:`costmodel.physics.mechanics.zero3_fetch.layer_tensors`): ``fused`` (the default: Megatron-LM and
        Megatron-DeepSpeed, one QKV and one gate/up projection) or ``hf`` (Hugging Face modules: Q, K,
        V and gate, up apart). It sets DeepSpeed's per-module fetches and reduce buckets; FSDP
        gathers a block as one unit whatever its modules; Megatron builds its own fused modules only.
    layout : the pipeline layout (:class:`costmodel.spec.layout.Layout`, or its Megatron-Core text
        ``"Et*3|(tt|)*29|L"``, read for ``pp`` ranks): the decoder layers, embedding and loss of every
        virtual stage, empty stages allowed. When set, ``vp`` and ``layers_per_stage`` are the
        layout's (they are derived, whatever was passed); ``None``: the layout of
        ``layers_per_stage`` / the even split (:func:`costmodel.spec.layout.of`).
    dma : the DMA engines each communication stream runs on (:class:`costmodel.spec.dma_plan.Assignment`,
        or its text ``"tp:cdma*2,dp:cdma*1,pp:cdma*1"`` / dict); ``None`` = the default
        assignment (:func:`costmodel.physics.comm.dma.default_assignment`).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    sp: bool = False
    zero: int = 0
    recompute: str = "none"
    recompute_layers: int | None = None
    recompute_modules: tuple[str, ...] | None = None
    fp8_param_gather: bool = False
    optimizer_dtype: str = "fp32"
    optimizer_offload_fraction: float = 0.0
    overlap_cpu_optimizer_d2h_h2d: bool = False
    activation_offload_layers: int = 0
    offload_modules: tuple[str, ...] | None = None
    mb: int = 1
    vp: int = 1
    bucket_bytes: float = 40 * MB
    chunks: int = 1
    flash_attention: bool = True
    layers_per_stage: tuple[int, ...] | None = None
    framework: str = "megatron"
    fused_elementwise: bool = True
    fused_norm: bool | None = None
    ep_dispatcher: str = "alltoall"
    cp_impl: str = "ring"
    fsdp_copies: bool | None = None
    grad_dtype: str = "fp32"
    loss_impl: str = "fused"
    pp_grad_reduce: str = "step"
    sp_saved_inputs: str | None = None
    pp_free_stage_inputs: bool = False
    ep_overlap: bool = False
    module_layout: str = "fused"
    dma: _dma.Assignment | None = None
    layout: _layout.Layout | None = None

    def __post_init__(self):
        if self.layout is not None:
            self._take_layout()
        if self.fsdp_copies is None:  # as the framework runs it
            object.__setattr__(self, "fsdp_copies", self.framework == "fsdp2")
        if self.sp_saved_inputs is None:  # as the framework runs it
            object.__setattr__(self, "sp_saved_inputs", "gathered" if self.framework == "fsdp2" else "sharded")
        if self.dma is not None:
            object.__setattr__(self, "dma", _dma.parse(self.dma))
        check_fields(self)

    def _take_layout(self) -> None:
        lay = self.layout
        if type(self.pp) is not int or self.pp < 1:
            _positive_int("pp", self.pp)
        if isinstance(lay, str):
            lay = _layout.parse(lay, self.pp)
        if not isinstance(lay, _layout.Layout):
            raise SpecError("layout", lay, "a Megatron-Core layout string such as 'Et*3|(tt|)*29|L'")
        if lay.pp != self.pp:
            raise SpecError("layout", str(lay), f"a layout for pp={self.pp} pipeline ranks (it is for {lay.pp})")
        object.__setattr__(self, "layout", lay)
        object.__setattr__(self, "vp", lay.vp)
        object.__setattr__(self, "layers_per_stage", lay.per_rank())

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def recomputed_modules(self) -> frozenset:
        """Modules a ``selective`` recompute replays (``recompute_modules``, or the core attention alone);
        empty otherwise."""
        if self.recompute != "selective":
            return frozenset()
        return frozenset(self.recompute_modules or ("core_attn",))

    @property
    def norms_fused(self) -> bool:
        """The norms run as fused kernels (``fused_norm``, unset: as ``fused_elementwise``)."""
        return self.fused_elementwise if self.fused_norm is None else self.fused_norm

    @property
    def sp_on(self) -> bool:
        """Sequence parallelism in effect (it needs tp > 1)."""
        return self.sp and self.tp > 1

    def expert_tp(self) -> int:
        """Tensor-parallel degree inside an expert: ``tp`` without EP, 1 with EP."""
        return self.tp if self.ep == 1 else 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bucket_mb"] = d.pop("bucket_bytes") / MB
        if self.cp_impl == "ring":
            del d["cp_impl"]  # the default: plans without torch CP keep their keys
        if self.fused_norm is None:
            del d["fused_norm"]  # as the other element-wise ops: plan keys unchanged
        if self.fsdp_copies == (self.framework == "fsdp2"):
            del d["fsdp_copies"]  # the framework's own: plan keys unchanged
        if self.sp_saved_inputs == ("gathered" if self.framework == "fsdp2" else "sharded"):
            del d["sp_saved_inputs"]  # the framework's own: plan keys unchanged
        if not self.pp_free_stage_inputs:
            del d["pp_free_stage_inputs"]  # the default: plan keys unchanged
        if not self.ep_overlap:
            del d["ep_overlap"]  # the default: plan keys unchanged
        if self.grad_dtype == "fp32":
            del d["grad_dtype"]  # the default: plan keys unchanged
        if self.loss_impl == "fused":
            del d["loss_impl"]  # the default: plan keys unchanged
        if self.pp_grad_reduce == "step":
            del d["pp_grad_reduce"]  # the default: plan keys unchanged
        if self.module_layout == "fused":
            del d["module_layout"]  # the default: plan keys unchanged
        if not self.fp8_param_gather:
            del d["fp8_param_gather"]  # the default: plan keys unchanged
        if self.optimizer_dtype == "fp32":
            del d["optimizer_dtype"]  # the default: plan keys unchanged
        if self.optimizer_offload_fraction == 0.0:
            del d["optimizer_offload_fraction"]  # the default: plan keys unchanged
        if not self.overlap_cpu_optimizer_d2h_h2d:
            del d["overlap_cpu_optimizer_d2h_h2d"]  # the default: plan keys unchanged
        if not self.activation_offload_layers:
            del d["activation_offload_layers"]  # the default: plan keys unchanged
        if self.offload_modules is None:
            del d["offload_modules"]  # the default: plan keys unchanged
        else:
            d["offload_modules"] = list(self.offload_modules)
        if self.recompute_modules is None:
            del d["recompute_modules"]  # the default: plan keys unchanged
        else:
            d["recompute_modules"] = list(self.recompute_modules)
        if self.dma is None:
            del d["dma"]  # the default: the keys of plans without an assignment stay as they were
        else:
            d["dma"] = str(self.dma)
        if self.layout is None:
            del d["layout"]  # the keys of plans without a layout stay as they were
        else:
            d["layout"] = str(self.layout)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ParallelConfig":
        d = dict(d)
        unknown = (
            set(d)
            - set(CONFIG_KEYS)
            - {
                "recompute_layers",
                "bucket_bytes",
                "flash_attention",
                "layers_per_stage",
                "framework",
                "fused_elementwise",
                "fused_norm",
                "ep_dispatcher",
                "cp_impl",
                "fsdp_copies",
                "grad_dtype",
                "dma",
                "recompute_modules",
                "fp8_param_gather",
                "optimizer_dtype",
                "layout",
                "loss_impl",
                "module_layout",
                "pp_grad_reduce",
                "optimizer_offload_fraction",
                "sp_saved_inputs",
                "pp_free_stage_inputs",
                "ep_overlap",
                "overlap_cpu_optimizer_d2h_h2d",
                "activation_offload_layers",
                "offload_modules",
            }
        )
        if unknown:
            raise SpecError("config", sorted(unknown)[0], f"one of {', '.join(CONFIG_KEYS)}")
        if "bucket_mb" in d:
            v = d.pop("bucket_mb")
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise SpecError("bucket_mb", v, "a non-negative size in MB (0 = no overlap)")
            d["bucket_bytes"] = v * MB
        return cls(**d)


def micro_batches(workload: Workload, config: ParallelConfig) -> int:
    """Micro-batches per pipeline per step: global batch / (dp * mb)."""
    return workload.global_batch // (config.dp * config.mb)
