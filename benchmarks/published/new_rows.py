"""The new set's rows (``published_new.csv``, and the sealed split): the rules of the package docstring, "New set"."""

from __future__ import annotations

from dataclasses import replace

from costmodel.frameworks.stacks import FA2_HOPPER_RATIO, fa2_device
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.plan_checks import RECOMPUTE_MODULES
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import DTYPES, Workload

from benchmarks.regimes import regimes_of

from .cells import cell_int, cell_num
from .layout import stage_layout
from .measured import measured_step_s
from .row import Row
from .sources import (
    AUTOMODEL_FULL_AC,
    BF16_MODEL,
    COMPILE_STATED,
    FULL_SHARD,
    GPUS_PER_NODE,
    MEGATRON_DEEPSPEED_2022,
    TORCHTITAN_AC_EVERY,
    BLOCK_SCALED,
    BRIDGE_2509_RECIPES,
    BRIDGE_2511_RECIPES,
    BRIDGE_BF16_GRADS,
    BRIDGE_FP8_PARAMS,
    BRIDGE_TE_LOSS,
    BRIDGE_TABLES,
    FA2_STACKS,
    FRAMEWORK,
    FSDP2_COPIES,
    LLAMA3_VP,
    MCORE_MODULE_NAMES,
    MCORE_DSV3_GUIDE,
    MCORE_RECIPES,
    MODEL_PRESET,
    MODELZOO_FG_OFFLOAD,
    MXFP8_PARAMS,
    NOT_MODELLED,
    TORCHTITAN,
    TORCHTITAN_DSV3,
    TORCHTITAN_FUSED_RMSNORM,
    EXPERTS_ONLY_BLOCK_SCALED,
    TUNED_TABLES,
    nemo_bf16_grads,
)


def _cluster_name(gpu: str) -> str:
    g = gpu.upper()
    # issue 39: the rack-scale presets (72-GPU NVLink domain, 4 GPUs per host) before the HGX ones they contain
    if "GB300" in g:
        return "gb300-nvl72"
    if "GB200" in g:
        return "gb200-nvl72"
    if "B300" in g:
        return "b300"
    if "B200" in g:
        return "b200"
    if "H800" in g:
        return "h800"
    if "H200" in g:
        return "h200"
    if "H100" in g:
        return "h100-96g" if "96GB" in g.replace(" ", "") else "h100-sxm"
    if "A100" in g and "40GB" in g.replace(" ", ""):
        return "a100-40g"
    if "A100" in g or "AMPERE" in g:
        return "a100-80g"
    raise KeyError(gpu)


def _zero(src: str, sharding: str, pp: int, notes: list, moe: bool = False) -> int:
    s = sharding.lower()
    if "megatron-fsdp" in s:
        return 3
    if src == "nemo_automodel" and moe:
        # AutoModel shards MoE models with its own parallelizer: every block, the embedding and the head
        # fully_shard(reshard_after_forward=MoEParallelizerConfig.reshard_after_forward), default False
        # (nemo_automodel/components/moe/parallelizer.py apply_fsdp, components/distributed/config.py
        # @cb97654); the rows' configs leave it False (deepseek, gptoss_120b: 'moe: reshard_after_forward: false')
        notes.append("FSDP2 reshard_after_forward=False (AutoModel's MoE parallelizer default) -> zero 2")
        return 2
    if src in TORCHTITAN or src == "nemo_automodel":
        z = 3 if pp == 1 else 2
        notes.append(f"FSDP2 reshard_after_forward={'True' if z == 3 else 'False (PP on)'} -> zero {z}")
        return z
    if src == "llmfoundry_2024" or (src in FULL_SHARD and "hsdp" not in s and "none" not in s):
        return 3
    if src == "llama3_2024":
        return 2  # FSDP sharding optimizer state and gradients, parameters kept after forward
    if "zero2" in s:
        return 2
    if "zero1" in s or "distributed optimizer" in s or src in MCORE_RECIPES:
        if not s:
            notes.append("zero 1 (distributed optimizer of the recipes; not stated)")
        return 1
    return 0


def new_row(r: dict, set_name: str = "new") -> Row:
    src, label = r["source_key"], r["model"]
    gpus = cell_int(r["num_gpus"])
    notes: list[str] = []
    skip = ""
    preset = MODEL_PRESET.get(label)
    model = load_model(preset) if preset else None
    if model is None:
        skip = NOT_MODELLED.get(label, f"no model preset for {label!r}")
    try:
        cluster = load_cluster(_cluster_name(r["gpu_type"])).with_gpus(gpus)
    except KeyError:
        cluster, skip = None, skip or f"no cluster preset for {r['gpu_type']!r}"
    if cluster is not None and src in GPUS_PER_NODE:
        cluster = replace(cluster, gpus_per_node=GPUS_PER_NODE[src])
        notes.append(f"{GPUS_PER_NODE[src]} GPUs per node (stated); links per GPU as the preset's")
    if "hsdp" in r["zero_or_sharding"].lower():
        skip = skip or "HSDP (sharded within a node, replicated across nodes) is not modelled"
    seq = cell_int(r["seq_len"])
    batch = cell_int(r["global_batch"])
    tp, pp, cp, ep = cell_int(r["tp"]), cell_int(r["pp"]), cell_int(r["cp"], 1), cell_int(r["ep"], 1)
    if (
        src == "nemo_automodel"
        and not cell_num(r["ep"])
        and cell_int(r["moe_experts"], 0)
        and "deepep" in r["other_metric"].lower()
    ):
        # AutoModel's table prints EP '-' for the GPT-OSS rows, but they run DeepEP (an EP dispatcher) and
        # the benchmark configs it names set ep_size to the whole job (examples/llm_benchmark/gpt_oss/
        # gptoss_20b_te_deepep.yaml: ep_size 8 on 8 GPUs; gptoss_120b_te_deepep.yaml: ep_size 64 on 64)
        ep = gpus // ((tp or 1) * (pp or 1) * cp)
        notes.append(f"ep {ep}: EP '-' in the table; DeepEP runs and the named benchmark config sets ep_size = GPUs")
    dtype = "fp8" if r["precision"] == "FP8" else "bf16"
    block = BLOCK_SCALED.get(r["precision"].strip().upper())
    if block is not None and src in EXPERTS_ONLY_BLOCK_SCALED:
        skip = skip or (
            f"{r['precision']} on the routed experts' grouped GEMMs only (attention, shared-expert and dense "
            "linears BF16): a per-module precision is not modelled (EXPERTS_ONLY_BLOCK_SCALED)"
        )
    elif block is not None:
        if block in DTYPES:
            dtype = block
            notes.append(f"dtype {block}: the stated {r['precision']} recipe")
        else:
            # issue 39: MXFP8/NVFP4 stated; not charged as per-tensor FP8 (the planner has no such dtype yet)
            skip = skip or f"{r['precision']} recipe not modelled (no {block} dtype in costmodel.spec.workload.DTYPES)"
    if tp is None or pp is None:
        skip = skip or "TP/PP not stated (strong-scaling end point)"
        tp, pp = tp or 1, pp or 1
    dp = cell_int(r["dp"]) or cell_int(r["derived_dp"]) or gpus // (tp * pp * cp)
    if not cell_num(r["dp"]) and cell_num(r["derived_dp"]):
        notes.append("dp from derived_dp (the printed DP is inconsistent with the GPU count)")
    if tp * pp * dp * cp != gpus and not skip:
        skip = f"tp*pp*dp*cp = {tp * pp * dp * cp} != {gpus} GPUs"
    if src == "deepseek_v3_2024":
        skip = skip or (
            "measured value is the whole-run average GPU-hour cost (batch ramp, restarts), not a "
            "step; DualPipe schedule not modelled"
        )
    vp_text = r["vp"].strip()
    vp = cell_int(vp_text.split(" ")[0])
    if vp is None and src == "llama3_2024" and pp == 16 and model is not None and model.layers == 126:
        vp = LLAMA3_VP
        notes.append(
            f"v {LLAMA3_VP}: the paper's first chunk holds only the embedding once the first stage has one "
            "layer fewer (section 3.3.2), so each virtual stage holds one layer: (126 + 2) / 16"
        )
    if vp is None:
        if "interleaved" in vp_text:
            vp = 2
            notes.append("v not stated for an interleaved schedule: 2")
        else:
            vp = 1
    mb = cell_int(r["micro_batch"])
    free: dict = {}
    if src in TUNED_TABLES:
        if mb is None:
            free["mb"] = [1, 2, 4, 8]
        if pp > 1 and "not stated" in vp_text and model is not None and model.layers % pp == 0:
            per = model.layers // pp
            free["vp"] = [v for v in range(1, per + 1) if per % v == 0]
        notes.extend(f"{k} chosen by the planner from {v} (tuned table, not stated)" for k, v in free.items())
    if mb is None and dp and "mb" not in free:
        if src in TORCHTITAN:
            mb = max(1, (batch or 1) // (dp * pp))
            notes.append(
                f"mb {mb} = local batch / {pp} pipeline micro-batches (torchtitan default)"
                if pp > 1
                else f"mb {mb} = local batch (no accumulation)"
            )
        else:
            mb = 1
            notes.append("mb 1 (not stated)")
    rec = r["recompute"].lower()
    recompute = "full" if rec.startswith("full") else ("selective" if rec.startswith("selective") else "none")
    if src in TORCHTITAN and rec.startswith("selective layer") and model is not None:
        recompute = "full"
        extra_ac = {"recompute_layers": model.layers // TORCHTITAN_AC_EVERY}
        notes.append(f"selective layer = every {TORCHTITAN_AC_EVERY}nd block checkpointed whole (TORCHTITAN_AC_EVERY)")
    else:
        extra_ac = {}
    if src == "nemo_automodel" and not rec and (label, gpus) in AUTOMODEL_FULL_AC:
        recompute = "full"
        notes.append(
            f"full recompute: activation_checkpointing true in {AUTOMODEL_FULL_AC[label, gpus]} (the named config)"
        )
    elif not rec:
        notes.append("no recompute (not stated)")
    if src in TORCHTITAN and recompute == "selective":
        # torchtitan's selective AC is per-op (selective_ac_option 'op': train_configs/llama3_8b.toml at 327b72b,
        # the config of these Llama 3 8B rows; rows 151/152 state "per-op SAC"), not Megatron's attention-only
        recompute = "op_sac"
        notes.append("selective = torchtitan per-op SAC (recompute op_sac; selective_ac_option 'op')")
    modules, extra = None, dict(extra_ac)
    if recompute == "selective" and src in MCORE_RECIPES and "(" in rec:
        # Megatron-Core --recompute-modules as the source lists them, e.g. "selective (layernorm, moe)"
        named = tuple(MCORE_MODULE_NAMES.get(m.strip(), m.strip()) for m in rec.split("(", 1)[1].rstrip(")").split(","))
        if all(m in RECOMPUTE_MODULES for m in named):
            modules = named
            notes.append(f"--recompute-modules {' '.join(named)} (stated)")
        else:
            notes.append(
                f"recompute modules {', '.join(named)} stated; not all modelled "
                f"({', '.join(RECOMPUTE_MODULES)}): charged as Megatron's default (core attention)"
            )
    zero = _zero(src, r["zero_or_sharding"], pp, notes, moe=bool(cell_int(r["moe_experts"], 0)))
    megatron_2023 = src == "megascale2024"
    if src in MCORE_RECIPES:
        sp, chunks = tp > 1, (tp if tp > 1 else 1)
        bucket = max(40e6, 1e6 * dp) * 4  # Megatron-Core default bucket, FP32 gradient elements
    elif megatron_2023:
        sp, chunks, bucket = tp > 1, 1, 0  # SP on, no TP overlap (MegaScale's own): module docstring
    elif src in MEGATRON_DEEPSPEED_2022:
        sp, chunks, bucket = False, 1, 0  # no SP, no TP overlap, no bucketed overlap: MEGATRON_DEEPSPEED_2022
        notes.append(
            "Megatron-DeepSpeed 2022: no sequence parallel, no FlashAttention, gradients reduced after the step"
        )
    else:
        sp = tp > 1
        chunks = tp if (tp > 1 and "async tp" in r["other_metric"].lower()) else 1
        bucket = ParallelConfig().bucket_bytes
    framework = FRAMEWORK.get(src, "megatron")
    fused = True
    if src in COMPILE_STATED and "torch.compile no" in r["other_metric"].lower():
        fused = False  # training.compile off: the Llama block's norms, RoPE, SwiGLU run eager
        notes.append("torch.compile off (stated): eager element-wise kernels (fused_elementwise False)")
    other = r["other_metric"].lower()
    dispatcher = "deepep" if "deepep" in other else "alltoall"
    if dispatcher == "deepep" and ep > 1:
        notes.append("DeepEP dispatcher (stated): one network copy per destination node")
    if "hybridep" in other and ep > 1:
        # issue 39: the flex dispatcher's HybridEP backend is modelled (costmodel ep_dispatcher hybridep)
        dispatcher = "hybridep"
        notes.append("HybridEP dispatcher (stated, or in the recipe): ep_dispatcher hybridep")
    if ep > 1 and ("moe_a2a_overlap true" in other or "1f1b overlap" in other):
        # Megatron-Core --overlap-moe-expert-parallel-comm: one micro-batch's all-to-all behind another's compute
        if framework == "megatron" and recompute != "full" and (pp == 1 or (vp or 1) > 1):
            extra["ep_overlap"] = True
            notes.append(
                "ep_overlap: the EP all-to-all overlap ran (stated, or in the recipe): costmodel.compose.ep_overlap"
            )
        else:
            notes.append(
                "EP all-to-all overlap ran (stated, or in the recipe) in a plan Megatron-Core refuses it with: "
                "charged without it"
            )
    if framework == "megatron" and zero == 2:
        # MegaScale's "ZeRO-2" is Megatron-LM's distributed optimizer (the system is built on Megatron-LM):
        # gradients reduce-scattered once per step, optimizer state sharded; Megatron has no per-micro-batch ZeRO-2
        zero = 1
        notes.append("zero 1: the stated ZeRO-2 is Megatron-LM's distributed optimizer (costmodel.frameworks.rules)")
    cp_impl = "ring"
    if src in TORCHTITAN and cp > 1:
        # torchtitan 327b72b runs PyTorch's context_parallel (default all-gather rotater) on K/V repeated to the
        # query heads (repeat_kv before SDPA); costmodel.physics.kernels.compute.cp_exchange
        cp_impl = "torch"
        notes.append("cp_impl torch: PyTorch context_parallel, K/V (repeat_kv) all-gathered, dK/dV ring in FP32")
    if modules is not None:
        extra["recompute_modules"] = modules
    if src in BRIDGE_FP8_PARAMS and dtype == "fp8" and "blockwise" not in r["notes"].lower():
        extra["fp8_param_gather"] = True
        notes.append("fp8_param_gather (the Bridge FP8 recipes' FP8 parameters: BRIDGE_FP8_PARAMS)")
    if src in MXFP8_PARAMS and dtype == "mxfp8":
        extra["fp8_param_gather"] = True
        notes.append(
            "fp8_param_gather (the recipe's MXFP8 parameters, --reuse-grad-buf-for-mxfp8-param-ag: MXFP8_PARAMS)"
        )
    if src in BRIDGE_BF16_GRADS:
        extra["grad_dtype"] = "bf16"
        notes.append("BF16 gradient buffer: grad_reduce_in_fp32 False in the Bridge perf scripts (BRIDGE_BF16_GRADS)")
    if src in BRIDGE_TE_LOSS:
        extra["loss_impl"] = "te"
        notes.append("Transformer Engine's cross-entropy: cross_entropy_fusion_impl te (BRIDGE_TE_LOSS)")
    gpu_key = next((g for g in ("GB300", "GB200", "B300", "B200") if g in r["gpu_type"].upper()), "")
    recipe_2511 = BRIDGE_2511_RECIPES.get((label, gpu_key, r["precision"].strip().upper()))
    fg = MODELZOO_FG_OFFLOAD.get((label, gpu_key, r["precision"].strip().upper(), seq))
    if src == "moe_modelzoo_blackwell" and fg:
        extra["offload_modules"] = fg
        notes.append(f"--offload-modules {' '.join(fg)}: the ModelZoo command (MODELZOO_FG_OFFLOAD)")
    if src == "megatron_bridge_perf_blackwell" and recipe_2511 is not None and not rec:
        knobs, where = recipe_2511
        extra.update(knobs)
        recompute = knobs.get("recompute", recompute)
        stated = ", ".join(f"{k} {v}" for k, v in knobs.items()) or "nothing beyond the stated degrees"
        notes.append(f"{stated}: the Bridge 25.11 performance recipe ({where}; BRIDGE_2511_RECIPES)")
    for (prefix, gpu), recipe in BRIDGE_2509_RECIPES.items():
        if src == "megatron_bridge_perf" and label.startswith(prefix) and gpu in r["gpu_type"] and not rec:
            extra.update(recipe)
            notes.append(
                f"{', '.join(f'{k} {v}' for k, v in recipe.items())}: the Bridge 25.09 performance script "
                "for this model and GPU (BRIDGE_2509_RECIPES)"
            )
    if src in MCORE_DSV3_GUIDE:
        extra.update(MCORE_DSV3_GUIDE[src])
        notes.append(
            "layout Et|(tt|)*30L, fp8_param_gather, loss_impl te, forced balance, no MTP: the guide's reproduce "
            "command (MCORE_DSV3_GUIDE); its BF16 Adam moments are charged as FP32"
        )
        if model is not None:
            model = replace(model, mtp_layers=0)
    if src == "nemo_automodel" and model is not None and model.mtp_layers:
        # AutoModel's DeepseekV3Model builds num_hidden_layers blocks and no MTP module (nemo_automodel/components/
        # models/deepseek_v3/model.py@cb976544); Megatron-Bridge's recipe sets cfg.model.mtp_num_layers = 1
        # (src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py@067f987d): those rows keep the model's
        model = replace(model, mtp_layers=0)
        notes.append("mtp_layers 0: AutoModel's DeepSeek-V3 has no MTP module")
    if src in TORCHTITAN_DSV3 and model is not None and model.mtp_layers:
        model = replace(model, mtp_layers=0)
        notes.append("mtp_layers 0: torchtitan's DeepSeek-V3 has no MTP module (TORCHTITAN_DSV3)")
    if src == "llama3_2024" and framework == "fsdp2" and zero == 2 and pp > 1:
        extra["pp_grad_reduce"] = "microbatch"
        notes.append(
            "pp_grad_reduce microbatch: the paper's FSDP 'shards optimizer states and gradients' and "
            "reduce-scatters them in FP32 (section 3.3.2): ZeRO-2 under PP, not torch.distributed.pipelining's "
            "once-per-step sync"
        )
    if src == "llama3_2024" and framework == "fsdp2" and tp > 1 and sp:
        # not stated: the paper names no TP implementation. Under PyTorch DTensor SP (the fsdp2 default, 'gathered')
        # the QKV and MLP inputs are saved whole, and the 8K run it reports "without activation checkpointing"
        # (section 3.3.2) could not have fit in 80 GiB (rows 113/114: 73.8 -> 132.6 GiB): inferred from that statement
        extra["sp_saved_inputs"] = "sharded"
        notes.append(
            "sp_saved_inputs sharded: Meta's own TP, not DTensor; the paper's no-checkpointing 8K run does "
            "not fit with the GEMM inputs saved all-gathered (inferred, not stated)"
        )
    if src == "llama3_2024" and pp > 1:
        extra["pp_free_stage_inputs"] = True
        notes.append(
            "pp_free_stage_inputs: 'we proactively deallocate tensors that will not be used for future "
            "computation, including the input and output tensors of each pipeline stage' (section 3.3.2)"
        )
    if not fused and (src, preset) in TORCHTITAN_FUSED_RMSNORM:
        extra["fused_norm"] = True
        notes.append("fused_norm: the preset's norm_type = 'fused_rmsnorm' (TORCHTITAN_FUSED_RMSNORM)")
    if src in BF16_MODEL:
        extra["optimizer_dtype"] = "bf16"
        notes.append("optimizer_dtype bf16: the model is cast to BF16 and AdamW updates it in place (BF16_MODEL)")
    if src == "nemo_automodel":
        extra["optimizer_dtype"] = "bf16"
        notes.append(
            "optimizer_dtype bf16: AutoModel builds the model in bfloat16 (from_config torch_dtype 'auto' "
            "-> bfloat16) and the configs' torch.optim.Adam updates it in place"
        )
    if nemo_bf16_grads(src, label):
        extra["grad_dtype"] = "bf16"
        notes.append("BF16 gradient buffer: grad_sync_dtype=bf16 in the NeMo launcher's H100 recipes (NEMO_BF16_GRADS)")
    fixed = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        sp=sp,
        mb=mb or 1,
        recompute=recompute,
        zero=zero,
        flash_attention=not (megatron_2023 or src in MEGATRON_DEEPSPEED_2022),
        bucket_bytes=bucket,
        chunks=chunks,
        vp=vp,
        framework=framework,
        fused_elementwise=fused,
        ep_dispatcher=dispatcher,
        cp_impl=cp_impl,
    )
    fixed.update(extra)
    if framework == "fsdp2":
        fixed["fsdp_copies"] = src in FSDP2_COPIES  # FSDP1 / Meta's FSDP: no per-parameter copies
    regime_vp = vp
    if model is not None:
        if src == "llama3_2024" and pp == 16 and model.layers == 126:
            lps = (7,) + (8,) * 14 + (7,)  # paper Section 3.3.2: first and last stage one layer fewer
        else:
            _, lps = stage_layout(model.layers, pp, vp)
        if lps is not None and "layout" not in fixed:
            fixed["layers_per_stage"] = lps
        if model.is_moe:
            other = r["other_metric"].lower()
            balanced = (
                src in BRIDGE_TABLES or src in MCORE_DSV3_GUIDE or src == "nemo_automodel" or "forced balance" in other
            )
            if balanced:
                model = replace(model, moe_load_cv=0.0)
                notes.append("moe_load_cv 0 (source forced a balanced router / token drop)")
            if src == "nemo_automodel":
                # every AutoModel benchmark config of these rows sets backend fake_balanced_gate: true (noise 0):
                # FakeBalancedGate routes token t to experts t*k .. t*k+k-1 mod E (nemo_automodel/components/moe/
                # layers.py@cb97654), neighbouring experts on one or two ranks (costmodel.physics.comm.ep_dispatch.fanout)
                model = replace(model, moe_routing="consecutive")
                notes.append("moe_routing consecutive: AutoModel's FakeBalancedGate (fake_balanced_gate: true)")
            if src in TORCHTITAN_DSV3 and balanced:
                # torchtitan's --debug.moe_force_load_balance: token t to experts t*k .. t*k+k-1 mod E (moe.py)
                model = replace(model, moe_routing="consecutive")
                notes.append("moe_routing consecutive: torchtitan's --debug.moe_force_load_balance (TORCHTITAN_DSV3)")
    if batch is None:
        skip = skip or "global batch not stated"
    elif dp and batch % dp:
        skip = skip or (
            f"global batch {batch} is not a multiple of dp {dp}: the source's DP, GPU and batch columns disagree"
        )
    if cluster is not None and src in FA2_STACKS and (src != "nemo_longseq" or "H100" in r["gpu_type"]):
        fa2 = fa2_device(cluster.device)
        if fa2 is not cluster.device:
            cluster = replace(cluster, device=fa2)
            notes.append(
                f"attention kernel FlashAttention-2 ({FA2_STACKS[src]}): {FA2_HOPPER_RATIO} x the "
                "preset's cuDNN-class attention efficiency"
            )
    wl = Workload(global_batch=batch or 1, seq_len=seq or 1, dtype=dtype if dtype in DTYPES else "bf16")
    measured, how = (None, "")
    if model is not None and batch:
        measured, how = measured_step_s(r, model, seq, gpus, batch)
    if measured is None and not skip:
        skip = "no step time, throughput or TFLOP/s with a known FLOP convention"
    layers = model.layers if model is not None else cell_int(r["layers"])
    for k in free:
        fixed.pop(k, None)
    row = Row(
        r["row_id"],
        src,
        label,
        model,
        cluster,
        wl,
        fixed,
        free,
        measured,
        skip,
        set=set_name,
        gpus=gpus,
        notes=notes,
        measured_how=how,
    )
    row.regimes = regimes_of(
        dict(
            gpu=cluster.device.name if cluster else r["gpu_type"],
            dtype=dtype if dtype in ("bf16", "fp16", "fp8") else "fp8",
            experts=cell_int(r["moe_experts"], 0),
            topk=cell_int(r["moe_topk"], 0),
            ep=ep,
            gpus=gpus,
            cp=cp,
            seq=seq or 0,
            layers=layers,
            pp=pp,
            vp=regime_vp,
            sharding=r["zero_or_sharding"],
            zero=zero,
        )
    )
    return row
