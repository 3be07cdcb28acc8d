"""What each source of the published rows leaves to its software: one rule per source, never per row (the
package docstring), and the CSV files of the sets."""

from __future__ import annotations

from pathlib import Path


DATA = Path(__file__).parent.parent / "data" / "published_dev.csv"
DATA_NEW = Path(__file__).parent.parent / "data" / "published_new.csv"
#: the sealed test split (issue 38): new sources placed there by a rule on their key, never by their errors
#: (``benchmarks/data/sealed/README.md``). Loaded only when asked for by name; ``all`` is the development and
#: new sets, what the model is developed and fitted on.
DATA_SEALED = Path(__file__).parent.parent / "data" / "sealed" / "published_sealed.csv"
#: issue 20's sealed split, scored once (2026-12-02) and spent (``benchmarks/data/spent/README.md``): loaded by
#: name only, never part of ``all``
DATA_SPENT = Path(__file__).parent.parent / "data" / "spent" / "published_spent_2026-12-02.csv"
SETS = {"dev": DATA, "new": DATA_NEW, "sealed": DATA_SEALED, "spent": DATA_SPENT}
#: the source keys in the data before issue 38 (dev 4, new 6, spent 5): the sealed split of issue 38 is drawn
#: only from sources added after them (``benchmarks/data/sealed/README.md``, the rule)
SOURCES_BEFORE_38 = (
    "narayanan2021",
    "korthikanti2022",
    "megatron_readme_2020",
    "nemo_2407",
    "megatron_readme_2024",
    "llama3_2024",
    "megascale2024",
    "moe_modelzoo_qwen3",
    "nemo_automodel",
    "deepseek_v3_2024",
    "torchtitan_2024",
    "megatron_bridge_perf",
    "torchtitan_2025_asynctp",
    "nemo_longseq",
    "llmfoundry_2024",
)
#: the source keys in the data before issue 39: the 15 above and the 10 of issue 38 (8 sealed, 2 in the new set)
SOURCES_BEFORE_39 = SOURCES_BEFORE_38 + (
    "torchao_float8_h100_2025",
    "flashattn_training_2023",
    "torchtitan_perf_a100_2024",
    "kempnerforge_mfu_2026",
    "torchtitan_mxfp8_b200_2025",
    "bloom_2022",
    "fms_fsdp_2024",
    "kempnerforge_weak_scaling_2026",
    "tinyllama_2023",
    "kempnerforge_175b_2026",
)
#: issue 39's sources, each named before any of its rows was placed (``benchmarks/data/sealed/README.md``, "Issue 39"):
#: the candidates for the seal, and the spent Bridge tables' Blackwell rows, development data that is never a candidate
SOURCES_39 = (
    "mcore_dsv3_gb200_guide_2025",
    "moe_modelzoo_blackwell",
    "pytorch_mxfp8_crusoe_b200_2025",
    "pytorch_mxfp8_moe_gb200_2025",
)
SPENT_39 = ("megatron_bridge_perf_blackwell",)
#: issue 39's second batch (MXFP8/NVFP4 memory and step time), named before any of its rows was placed
#: (``benchmarks/data/sealed/README.md``, "Issue 39, second batch"): ceil(0.3 x 2) = 1 sealed by smallest sha256
SOURCES_39B = (
    "megatron_bridge_recipe_docs_2026",
    "pytorch_mxfp8_deepep_dsv3_b200_2026",
)
#: sealed sources before issue 39 (issue 38's eight): the issue-39 rule seals enough new ones that 30% of all are sealed
SEALED_BEFORE_39 = 8

MODEL_PRESET = {
    # development set
    "GPT 1.7B": "gpt-1.7b",
    "GPT 3.6B": "gpt-3.6b",
    "GPT 7.5B": "gpt-7.5b",
    "GPT 18.4B": "gpt-18.4b",
    "GPT 39.1B": "gpt-39.1b",
    "GPT 76.1B": "gpt-76.1b",
    "GPT 145.6B": "gpt-145.6b",
    "GPT 310.1B": "gpt-310.1b",
    "GPT 529.6B": "gpt-529.6b",
    "GPT 1008.0B": "gpt-1t",
    "GPT 22B": "gpt-22b",
    "GPT 175B (GPT-3)": "gpt3-175b",
    "GPT 530B (MT-NLG)": "gpt-530b",
    "GPT 1T": "gpt-1t",
    "GPT-2-style 1B": "gpt-2-1b",
    "GPT-2-style 2B": "gpt-2-2b",
    "GPT-2-style 4B": "gpt-2-4b",
    "GPT-2-style 8B": "gpt-2-8b",
    "GPT3-5B": "gpt3-5b",
    "GPT3-20B": "gpt3-20b",
    "GPT3-175B": "gpt3-175b",
    "LLAMA2-7B": "llama2-7b",
    "LLAMA2-13B": "llama2-13b",
    "LLAMA2-70B": "llama2-70b",
    "Nemotron-8B": "nemotron-8b",
    "Nemotron-22B": "nemotron-22b",
    "Nemotron-340B": "nemotron4-340b",
    "LLAMA3-8B": "llama3-8b",
    "LLAMA3-70B": "llama3-70b",
    # new set
    "GPT 1.7B (Megatron weak-scaling)": "mcore-gpt-1.7b",
    "GPT 7.1B (Megatron weak-scaling)": "mcore-gpt-7.1b",
    "GPT 16B (Megatron weak-scaling)": "mcore-gpt-16b",
    "GPT 32B (Megatron weak-scaling)": "mcore-gpt-32b",
    "GPT 70B (Megatron weak-scaling)": "mcore-gpt-70b",
    "GPT 119B (Megatron weak-scaling)": "mcore-gpt-119b",
    "GPT 177B (Megatron weak-scaling)": "mcore-gpt-177b",
    "GPT 314B (Megatron weak-scaling)": "mcore-gpt-314b",
    "GPT 462B (Megatron weak-scaling)": "mcore-gpt-462b",
    "GPT 177B (GPT-3 shape, vocab 131072)": "mcore-gpt-177b",
    "Llama 3 405B": "llama3.1-405b",
    "GPT 175B (MegaScale Table 1)": "megascale-gpt-175b",
    "Llama 3.1 8B": "llama3.1-8b",
    "Llama 3.1 70B": "llama3.1-70b",
    "Llama 3.1 405B": "llama3.1-405b",
    "Llama 3 70B": "llama3-70b",
    "Llama 3 8B": "llama3-8b",
    "Llama3 70B": "llama3-70b",
    "MPT-3B": "mpt-3b",
    "MPT-7B": "mpt-7b",
    "MPT-13B": "mpt-13b",
    "MPT-30B": "mpt-30b",
    "MPT-70B": "mpt-70b",
    "LLAMA3_70B": "llama3-70b",
    "LLAMA3.1_405B": "llama3.1-405b",
    "LLAMA3_8B": "llama3-8b",
    "GPT OSS 120B": "gpt-oss-120b",
    "GPT-OSS 120B": "gpt-oss-120b",
    "GPT-OSS 20B": "gpt-oss-20b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3 MoE 30B": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b",
    "Qwen3_235B_a22B (tokendrop)": "qwen3-235b-a22b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "DeepSeekV3 (dropless)": "deepseek-v3",
    "DeepSeek V3 671B": "deepseek-v3",
    "DeepSeek-V3 (pre-training)": "deepseek-v3",
    "DeepSeekV3": "deepseek-v3",
    "Kimi K2": "kimi-k2",
    # issue 38's sources (the sealed split and the new set)
    "Llama 2 7B": "llama2-7b",
    "Llama 2 13B": "llama2-13b",
    "Llama 2 34B (fms-fsdp)": "llama2-34b-fms",
    "Llama 2 70B": "llama2-70b",
    "Llama-3 7B (KempnerForge)": "llama3-8b",
    "Llama-3 13B (KempnerForge)": "kempner-llama3-13b",
    "Llama-3 70B (KempnerForge)": "llama3-70b",
    "Llama-3 175B (KempnerForge)": "kempner-llama3-175b",
    "BLOOM 176B": "bloom-176b",
    "TinyLlama 1.1B": "tinyllama-1.1b",
    "GPT3-1.3B (FlashAttention)": "fa2-gpt3-1.3b",
    "GPT3-2.7B (FlashAttention, head dim 128)": "fa2-gpt3-2.7b",
    "Llama3-8b (torchtitan)": "llama3-8b",
}
#: model labels with no preset on purpose: the reason is the row's skip
NOT_MODELLED = {
    "GPT 175B (MegaScale Table 1) - MegaScale algorithm": "MegaScale algorithm (parallel attention/MLP block, sliding-window attention, LAMB) is not the standard model",
}
MEGATRON_ERA = ("megatron_readme_2020", "narayanan2021", "korthikanti2022")
#: sources whose FP16 runs reduced the FP16 gradients (``grad_dtype="fp16"``): Megatron-LM v1's LocalDDP
#: all-reduces each parameter's ``.grad`` in its own dtype unless ``--fp32-allreduce`` (default off;
#: megatron/model/distributed.py and arguments.py at 9edfdae, Aug 2020, the README tables' era); v2
#: accumulates and reduces in the parameter dtype unless ``--accumulate-allreduce-grads-in-fp32``
#: (default off, forced on only for BF16), and its GPT-3 175B example runs ``--fp16`` without it
#: (examples/pretrain_gpt3_175B.sh at a8d172b, Apr 2021, the SC21 paper's code). Korthikanti et al.
#: state neither dtype nor flag: FP32, the default, is kept for them and for every later source.
FP16_GRADS = ("megatron_readme_2020", "narayanan2021")
#: NeMo 1.x runs whose launcher recipe reduces gradients in BF16: NeMo-Framework-Launcher 24.07 (the NeMo 24.07
#: tables' release) ``examples/training/{gpt,llama}/h100/*.sh`` all pass ``+training.model.optim.grad_sync_dtype=bf16``
#: and ``launcher_scripts/conf/training/nemotron/nemotron_340b.yaml`` sets ``grad_sync_dtype: bf16`` (the Nemotron
#: 8B/22B examples set none: FP32); NeMo's ``setup_mcore_distributed_parallel`` turns it into Megatron-Core's
#: ``grad_reduce_in_fp32 = (grad_sync_dtype == 'fp32')``: a BF16 gradient buffer. The long-sequence table ran the
#: 24.03.01 container; the earliest launcher tag stored, 24.05, sets the same for every Llama H100 example.
NEMO_BF16_GRADS = {"nemo_2407": ("GPT3-", "LLAMA", "Nemotron-340B"), "nemo_longseq": ("LLAMA",)}
#: NeMo 1.x runs whose launcher recipe keeps the optimizer state in BF16 without a master copy
#: (``optimizer_dtype='bf16'`` under Megatron-Core zero=1): NeMo-Framework-Launcher 24.07's
#: ``launcher_scripts/conf/training/nemotron/nemotron_340b.yaml`` (the only 24.07 training config that does) runs
#: ``optim: name: distributed_fused_adam``, ``dtype: bf16``, ``megatron_amp_O2: true``, no ``fp8_params``; NeMo's
#: ``megatron_base_model.py`` (r2.0.0rc1 579983fb, ``setup_optimization``) then sets ``store_params=False`` ("optim_dtype
#: == model_dtype"), and Apex's ``DistributedFusedAdam`` (``apex/contrib/optimizers/distributed_fused_adam.py``
#: @59b80ee8, ``StateBucket``) allocates only ``exp_avg_shard`` and ``exp_avg_sq_shard`` in that dtype: 4 B per
#: parameter over the data-parallel ranks, the BF16 parameters updated in place. That config is the 768-node
#: pre-training plan (tp8 pp12 vp8, fp8 False), not the table's: the optimizer is the model's recipe, as the gradients.
NEMO_BF16_OPTIMIZER = {"nemo_2407": ("Nemotron-340B",)}


def nemo_bf16_grads(src: str, label: str) -> bool:
    """Whether a NeMo row's recipe reduces gradients in BF16 (:data:`NEMO_BF16_GRADS`)."""
    return any(label.startswith(prefix) for prefix in NEMO_BF16_GRADS.get(src, ()))


#: Megatron-Bridge FP8 recipes on Hopper keep FP8 parameters (``--fp8-param-gather``):
#: ``src/megatron/bridge/training/mixed_precision.py`` at 4ab94dfa, ``bf16_with_fp8_delayed_scaling_mixed`` and
#: ``bf16_with_fp8_current_scaling_mixed`` set ``fp8_param_gather = True``; the blockwise (DeepSeek-style) recipe
#: ``bf16_with_fp8_subchannel_scaling_mixed`` sets it False
BRIDGE_FP8_PARAMS = ("megatron_bridge_perf", "megatron_bridge_perf_blackwell")
#: Llama 3 405B's virtual stages per rank (arXiv 2407.21783 section 3.3.2): "we reduce one Transformer layer each
#: from the first and the last stages ... This means that the first model chunk on the first stage has only the
#: embedding, and the last model chunk on the last stage has only output projection and loss calculation": a chunk
#: of the full stages holds one layer, so 126 layers + the embedding and loss chunks make 16 x 8 virtual stages
LLAMA3_VP = 8
#: Megatron-Bridge's 25.09 performance runs, what ``scripts/performance`` sets beyond the stated degrees (the
#: "Cherry pick perf 2509" commit a28844195, at tag v0.1.0rc4): DeepSeek-V3 on H100 (``run_script.py``) runs
#: ``recompute_modules = ["mla_up_proj", "mlp"]`` (selective granularity, the recipe's default) with the layout
#: ``"Et|(tt|)*30mL"`` (the MTP layer with the loss), and ``configs/deepseek/deepseek_v3_llm_pretrain.yaml`` sets
#: ``mixed_precision.grad_reduce_in_fp32: false`` (a BF16 gradient buffer). Keyed by (label prefix, GPU).
#: (The recipe's precision-aware optimizer keeps BF16 Adam moments: not modelled, charged as FP32. The MTP layer
#: is the model's, ``mtp_layers = 1``: costmodel.physics.kernels.mtp.)
BRIDGE_2509_RECIPES = {
    ("DeepSeekV3", "H100"): dict(
        recompute="selective", recompute_modules=("mla_up_proj", "mlp"), layout="Et|(tt|)*30mL", grad_dtype="bf16"
    ),
}
#: Megatron-Bridge's 25.11 performance runs (``megatron_bridge_perf_blackwell``): every ``scripts/performance``
#: model script sets ``cfg.ddp.grad_reduce_in_fp32 = False`` in its ``set_*_common_configs`` (llama3/llama31/deepseek/
#: gpt_oss/qwen3 ``*_llm_pretrain.py`` at NVIDIA-NeMo/Megatron-Bridge@7af9601c9, tag v0.2.0, the r0.2.0 branch's
#: "25.11 release notes" commit, and at e940d997d): a BF16 gradient buffer (``grad_dtype='bf16'``)
#: and the Megatron-Bridge recipe docs (issue 39, second batch), whose docstring states "Gradient accumulation is BF16"
BRIDGE_BF16_GRADS = ("megatron_bridge_perf_blackwell", "megatron_bridge_recipe_docs_2026")
#: sources whose runs take Transformer Engine's cross-entropy (``loss_impl='te'``): the Bridge 25.11 performance
#: scripts' ``set_common_perf_overrides`` sets ``recipe.model.cross_entropy_fusion_impl = "te"`` for every model
#: (``scripts/performance/utils/helpers.py`` at NVIDIA-NeMo/Megatron-Bridge@7af9601c9) and the providers keep
#: ``cross_entropy_loss_fusion = True`` (``src/megatron/bridge/models/gpt_provider.py``, ``deepseek_provider.py``)
BRIDGE_TE_LOSS = ("megatron_bridge_perf_blackwell",)
#: sources whose MXFP8 runs keep MXFP8 parameters (``fp8_param_gather``; the BF16 all-gather reuses the gradient
#: buffer): the Bridge tables, whose ``fp8_mx`` precision is ``bf16_with_mxfp8_mixed`` (``scripts/performance/utils/
#: helpers.py`` ``get_precision_config``), which sets ``fp8_param_gather = True`` and ``reuse_grad_buf_for_mxfp8_param_ag
#: = True`` (``src/megatron/bridge/training/mixed_precision.py`` at NVIDIA-NeMo/Megatron-Bridge@7af9601c9, v0.2.0); the
#: ModelZoo's Blackwell commands, whose ``PR=mxfp8`` adds ``--fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag``
#: with ``OPTIMIZER_OFFLOAD`` at its default 0 (``sbatch_benchmarking.sh`` at yanring/Megatron-MoE-ModelZoo@798dfb5)
#: and the Megatron-Bridge recipe docs (issue 39, second batch): "MXFP8 parameter gather reuses the gradient buffer"
MXFP8_PARAMS = ("megatron_bridge_perf_blackwell", "moe_modelzoo_blackwell", "megatron_bridge_recipe_docs_2026")
#: the Megatron-LM DeepSeek-V3 GB200 guide (issue 39, sealed): what its reproduce command runs beyond the stated degrees,
#: the benchmark setup every row of its optimisation history shares (``docs/discussions/deepseek-v3-gb200-optimization/
#: deepseek-v3-gb200-reproduce-guide.md`` at NVIDIA/Megatron-LM@1d9edcf8): ``--pipeline-model-parallel-layout
#: "Et|(tt|)*30L"``, ``--fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag``, ``--cross-entropy-fusion-impl te``,
#: ``--moe-router-force-load-balancing`` and no ``--mtp-num-layers`` (the layout has no ``m``); read before any of its
#: rows was predicted. Not modelled: its ``--exp-avg-dtype bf16`` moments (charged as FP32) and the partial CUDA graphs
#: of the last row.
MCORE_DSV3_GUIDE = {
    "mcore_dsv3_gb200_guide_2025": dict(layout="Et|(tt|)*30L", fp8_param_gather=True, loss_impl="te"),
}
#: Megatron-Bridge's 25.11 performance runs on Blackwell, what ``scripts/performance`` sets beyond the table's stated
#: degrees (recompute, activation offloading, dispatcher, pipeline layout), keyed by (model label, GPU, precision
#: column), each with where it was read. The release's recipes are tag v0.2.0 (7af9601c9); the table's 70B / 405B
#: GBS-256 / 256-GPU rows are the ``_V2`` workload configs first committed in e940d997d ("support multiple perf
#: configs", 2026-01-11): same knobs as v0.2.0 for the 70B, no FSDP and no offloading for the 405B. Where the
#: table's degrees match no public recipe (DeepSeek-V3 GB300 PP2 VP4 EP32, GB200 MXFP8 PP8 VP4 EP32), the stated
#: degrees are kept and the GPU's v0.2.0 recipe gives the rest. Not modelled: CUDA graphs, the DeepSeek recipe's
#: precision-aware optimizer with BF16 Adam moments (charged as FP32 moments), overlap_param_gather off under MXFP8.
#: GPT-OSS 120B has no entry: its GB200/B200 configs list ``recompute_modules [layernorm, moe_act]``
#: (gpt_oss/workload_base_configs.py at 7af9601c9) but nothing sets ``recompute_granularity`` (gpt_oss_llm_pretrain.py,
#: recipes/gpt_oss, the provider), and Megatron-Core reads the modules only under ``'selective'``
#: (NVIDIA/Megatron-LM@0d8e0714, Bridge v0.2.0's submodule: transformer_layer.py ``if self.config.recompute_granularity
#: == 'selective'``, moe/experts.py ``activation_recompute``; TransformerConfig default None): no recompute ran.
_B = "NVIDIA-NeMo/Megatron-Bridge@7af9601c9 (v0.2.0) scripts/performance/configs/"
_V2 = "NVIDIA-NeMo/Megatron-Bridge@e940d997d scripts/performance/configs/"
_DSV3_LAYOUT = "Et*4|(t*4|)*14tmL"  # deepseek_v3.py layout_map (4, 4) and (16, 1) at 7af9601c9, MTP with the loss
BRIDGE_2511_RECIPES = {
    ("LLAMA3_70B", "GB300", "FP8"): (
        dict(activation_offload_layers=20),
        _V2 + "llama/llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2 (GBS 256; v0.2.0 "
        "llama3/workload_base_configs.py LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG the same at GBS 128): micro_batch_size 2, "
        "use_megatron_fsdp, cpu_offloading_num_layers 20 (cpu_offloading_weights False: utils/helpers.py)",
    ),
    ("LLAMA3_70B", "GB200", "FP8"): (
        dict(activation_offload_layers=40),
        _V2 + "llama/llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 (GBS 256; v0.2.0 "
        "LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG the same at GBS 128): micro_batch_size 2, use_megatron_fsdp, "
        "cpu_offloading_num_layers 40",
    ),
    ("LLAMA3.1_405B", "GB300", "FP8"): (
        {},
        _V2 + "llama/llama31_workload_base_configs.py LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2: TP2 PP8 CP2 VP4, "
        "256 GPUs, GBS 1536, use_megatron_fsdp False, cpu_offloading_num_layers None, no recompute",
    ),
    ("LLAMA3.1_405B", "GB200", "FP8"): (
        {},
        _V2 + "llama/llama31_workload_base_configs.py LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2: TP4 PP16 CP1 VP4, "
        "256 GPUs, GBS 1536, use_megatron_fsdp False, cpu_offloading_num_layers None, no recompute",
    ),
    ("LLAMA3.1_405B", "B200", "FP8"): (
        {},
        _B + "llama31/workload_base_configs.py LLAMA31_405B_B200_FP8_CS_BASE_CONFIG: TP4 PP8 CP2 VP8, GBS 64, "
        "no recompute, no offloading",
    ),
    ("LLAMA3.1_405B", "B200", "MXFP8"): (
        {},
        _B
        + "llama31/workload_base_configs.py LLAMA31_405B_B200_FP8_MX_BASE_CONFIG (= the FP8_CS one): TP4 PP8 CP2 VP8, "
        "GBS 64, no recompute, no offloading",
    ),
    **{
        ("DeepSeekV3", "GB300", p): (
            dict(recompute="selective", recompute_modules=("moe_act",), ep_dispatcher="hybridep"),
            _B + "deepseek/workload_base_configs.py DEEPSEEK_V3_GB300_BASE_CONFIG (all precisions): recompute_modules "
            "[moe_act] (selective: deepseek_llm_pretrain.py), hybridep, moe_a2a_overlap False, CUDA graphs attn "
            "moe_router moe_preprocess; its PP4 VP4 EP64 GBS 2048 are not the table's PP2 VP4 EP32 GBS 4096 (no "
            "public recipe has those; PP2 x VP4 needs a layout v0.2.0's layout_map lacks)",
        )
        for p in ("BF16", "MXFP8")
    },
    **{
        ("DeepSeekV3", "GB200", p): (
            dict(recompute="selective", recompute_modules=("mla_up_proj",), ep_dispatcher="hybridep"),
            _B + "deepseek/workload_base_configs.py DEEPSEEK_V3_GB200_BASE_CONFIG (all precisions; GBS 4096 = "
            "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V2 at e940d997d): PP4 VP4 EP64, recompute_modules [mla_up_proj] "
            "(selective), hybridep, moe_a2a_overlap False, CUDA graphs moe_router moe_preprocess"
            + (
                ", layout " + _DSV3_LAYOUT + " (recipes/deepseek/deepseek_v3.py layout_map (4, 4))"
                if p == "BF16"
                else "; the table's MXFP8 PP8 VP4 EP32 is in no public recipe (kept as stated)"
            ),
        )
        for p in ("BF16", "MXFP8")
    },
    ("DeepSeekV3", "B200", "MXFP8"): (
        dict(recompute="selective", recompute_modules=("mla_up_proj",), layout=_DSV3_LAYOUT),
        _B + "deepseek/workload_base_configs.py DEEPSEEK_V3_B200_BASE_CONFIG: PP16 EP8 GBS 2048, recompute_modules "
        "[mla_up_proj] (selective), no flex backend (alltoall: deepseek_provider.py), moe_a2a_overlap False; layout "
        + _DSV3_LAYOUT
        + " (recipes/deepseek/deepseek_v3.py layout_map (16, 1))",
    ),
}
#: the ModelZoo's Blackwell commands that run Megatron-Core's fine-grained activation offloading (``offload_modules``;
#: costmodel.physics.mechanics.fg_offload), keyed by (model label, GPU, precision, sequence): the GB200 MXFP8 4K command of
#: yanring/Megatron-MoE-ModelZoo@798dfb5 best_practice/qwen3/run_gb200_235b.sh (= readme.md, "activation offloading
#: required"): --fine-grained-activation-offloading --offload-modules expert_fc1 moe_act --delay-offload-until-cuda-graph
#: (the 128K GB200 MXFP8 and the GB300 commands of that file offload nothing)
MODELZOO_FG_OFFLOAD = {("Qwen3-235B-A22B", "GB200", "MXFP8", 4096): ("expert_fc1", "moe_act")}
MCORE_RECIPES = (
    "megatron_readme_2024",
    "nemo_longseq",
    "megatron_bridge_perf",
    "moe_modelzoo_qwen3",
    # issue 39: the Bridge tables' Blackwell rows, the ModelZoo's GB200/GB300 tables, the Megatron-LM GB200 guide
    "megatron_bridge_perf_blackwell",
    "moe_modelzoo_blackwell",
    "mcore_dsv3_gb200_guide_2025",
    # issue 39, second batch: a Megatron-Bridge training recipe whose docstring states its degrees and knobs
    "megatron_bridge_recipe_docs_2026",
)
#: the Megatron-Bridge tables (spent since issue 38; their Blackwell rows are development data in issue 39): force-balanced
#: routers ("we force-balance the token distribution among experts")
BRIDGE_TABLES = ("megatron_bridge_perf", "megatron_bridge_perf_blackwell")
#: precisions stated as a Blackwell block-scaled recipe (CSV ``precision``): read as that dtype where
#: ``costmodel.spec.workload.DTYPES`` has it, else the row is skipped (the recipe is not modelled); never charged as FP8
BLOCK_SCALED = {"MXFP8": "mxfp8", "NVFP4": "nvfp4"}
#: new-set sources whose unstated micro-batch and interleave are chosen by the planner (the development
#: set's rule for tuned tables; module docstring, "New set")
TUNED_TABLES = ("megatron_readme_2024",)
#: torchtitan runs: the benchmark files of torchtitan and the torchao pages that ran torchtitan's Llama 3 8B
#: (torchao/float8/README.md, torchtitan docs/mxfp8.md: "torch.compile, FSDP2, per-op SAC"), and the PyTorch/Nebius
#: DeepSeek-V3 runs (issue 39, second batch: the post's recipe nebius/ml-cookbook pytorch-dsv3-mxfp8/train_671b.sh
#: launches ``torchtitan.train`` at torchtitan 1a36996b)
TORCHTITAN = (
    "torchtitan_2024",
    "torchtitan_2025_asynctp",
    "torchtitan_perf_a100_2024",
    "torchao_float8_h100_2025",
    "torchtitan_mxfp8_b200_2025",
    "pytorch_mxfp8_deepep_dsv3_b200_2026",
)
#: torchtitan's own DeepSeek-V3 (``torchtitan/models/deepseek_v3`` at 1a36996b, the commit the recipe pins in its
#: ``setup.sh``): ``DeepSeekV3Model`` builds ``n_layers`` blocks and no multi-token-prediction module (``mtp_layers``
#: 0), and ``--debug.moe_force_load_balance`` (passed by ``train_671b.sh``) replaces the router's choice by
#: ``_debug_force_load_balance_routing``: token t to experts t*k .. t*k+k-1 mod E (``torchtitan/models/moe/moe.py``),
#: AutoModel's FakeBalancedGate's pattern (``moe_routing`` consecutive, ``moe_load_cv`` 0)
TORCHTITAN_DSV3 = ("pytorch_mxfp8_deepep_dsv3_b200_2026",)
#: sources whose block-scaled recipe quantizes only the routed experts' grouped GEMMs: the recipe's ``mxfp8_default``
#: passes ``--model.converters=quantize.grouped_mm.mx --quantize.grouped_mm.mx.fqns=experts`` (attention, shared
#: expert, dense-layer and output linears stay BF16; its README: "applies MXFP8 only to grouped GEMMs, not to attention
#: or shared-expert linear layers"). The planner's dtype is one format for every GEMM, so such a row is skipped
#: (never charged as MXFP8 everywhere, nor as BF16)
EXPERTS_ONLY_BLOCK_SCALED = ("pytorch_mxfp8_deepep_dsv3_b200_2026",)
#: KempnerForge's benchmark reports (KempnerInstitute/KempnerForge benchmarks/): PyTorch FSDP2 ``fully_shard`` over
#: ``dp_shard`` with the default ``reshard_after_forward=True`` (ZeRO-3; the 175B report: "FSDP2 dp_shard=90"), DTensor
#: TP inside a node, 4 H200 per node ("8 nodes, 4x NVIDIA H200 (141 GB) per node", every report's Hardware line)
KEMPNERFORGE = ("kempnerforge_mfu_2026", "kempnerforge_weak_scaling_2026", "kempnerforge_175b_2026")
#: GPUs per node where a source's cluster differs from its GPU's preset (8 per node in every preset)
GPUS_PER_NODE = dict.fromkeys(KEMPNERFORGE, 4)
#: sources whose sharded data parallelism is FSDP FULL_SHARD / FSDP2 with resharding after forward (ZeRO-3) without a
#: rule of their own: KempnerForge (above); fms-fsdp's "FSDP" rows (``sharding_strategy=fsdp``, FULL_SHARD); TinyLlama
#: (Lightning ``FSDPStrategy`` of pretrain/tinyllama.py sets no sharding_strategy: FULL_SHARD, the default)
FULL_SHARD = KEMPNERFORGE + ("fms_fsdp_2024", "tinyllama_2023")
#: torchtitan's 64-A100 presets at the performance page's commit (041336434, 2024-04-24) whose ``[model] norm_type``
#: is ``"fused_rmsnorm"`` (its Triton RMSNorm, ``torchtitan/models/norms.py``): ``train_configs/llama2_13b.toml`` and
#: ``llama3_8b.toml``; ``llama2_70b.toml`` and ``llama3_70b.toml`` set ``"rmsnorm"`` (eager). Keyed by
#: (source, model preset): with ``compile = false`` the rows run ``fused_norm`` True beside eager RoPE and SwiGLU
TORCHTITAN_FUSED_RMSNORM = {("torchtitan_perf_a100_2024", "llama2-13b"), ("torchtitan_perf_a100_2024", "llama3-8b")}
#: KempnerForge builds its model in the training dtype and lets ``torch.optim.AdamW`` update it in place:
#: ``scripts/train.py`` @9f3f03a0 l. 113 and 135 and ``build_parallel_model`` (``kempnerforge/distributed/
#: parallel.py``) run ``model.to(dtype=param_dtype)`` after ``fully_shard`` (``mixed_precision = "bf16"``), so the
#: sharded parameters, their gradients and Adam's moments are BF16 (``optimizer_dtype='bf16'``; FSDP2 still reduces
#: in FP32, ``default_mp_policy``'s ``reduce_dtype``). Unchanged at the snapshot's HEAD (5666d0d).
BF16_MODEL = KEMPNERFORGE
#: sources whose rows say whether ``torch.compile`` ran (other_metric ``torch.compile no``: eager element-wise kernels)
COMPILE_STATED = TORCHTITAN + KEMPNERFORGE + ("fms_fsdp_2024",)
#: Megatron-DeepSpeed of 2022 (BLOOM's tr11 run, bigscience-workshop/Megatron-DeepSpeed): no sequence parallelism (it
#: arrived in Megatron-LM with Korthikanti et al., 2022, after the fork), no FlashAttention (Megatron's fused softmax),
#: DeepSpeed's pipeline engine reduces gradients after the last micro-batch (no bucketed overlap), no TP overlap
MEGATRON_DEEPSPEED_2022 = ("bloom_2022",)
#: the framework that ran each new-set source (costmodel.frameworks.rules); unlisted: Megatron-Core / Megatron-LM
FRAMEWORK = {
    "torchtitan_2024": "fsdp2",
    "torchtitan_2025_asynctp": "fsdp2",  # torchtitan: FSDP2
    "nemo_automodel": "fsdp2",  # AutoModel: PyTorch-native FSDP2 trainer (its parallelizer follows torchtitan's)
    "llmfoundry_2024": "fsdp2",  # Composer FSDP FULL_SHARD: per-module gather in forward and backward, RS per micro-batch
    "llama3_2024": "fsdp2",  # Meta's FSDP, parameters not resharded after forward (zero=2 under fsdp2)
    "torchtitan_perf_a100_2024": "fsdp2",
    "torchao_float8_h100_2025": "fsdp2",
    "torchtitan_mxfp8_b200_2025": "fsdp2",
    "pytorch_mxfp8_deepep_dsv3_b200_2026": "fsdp2",  # torchtitan: FSDP2 (dp_shard), TP, PP, EP
    **dict.fromkeys(KEMPNERFORGE, "fsdp2"),
    "fms_fsdp_2024": "fsdp2",  # PyTorch FSDP (FSDP1, FlatParameter): fms_fsdp/utils/train_utils.py wraps with FSDP(...)
    "tinyllama_2023": "fsdp2",  # Lightning Fabric FSDPStrategy: PyTorch FSDP1
}
#: sources that ran PyTorch FSDP2 (``fully_shard``: per-parameter copy-out after each all-gather, gradient copy-in
#: before each reduce-scatter, ``ParallelConfig.fsdp_copies``); llm-foundry's Composer wraps FSDP1 (``FlatParameter``:
#: parameters are views of the gathered buffer) and Meta's Llama 3 FSDP is not PyTorch's: no copies charged
FSDP2_COPIES = (
    "torchtitan_2024",
    "torchtitan_2025_asynctp",
    "nemo_automodel",
    "torchtitan_perf_a100_2024",
    "torchao_float8_h100_2025",
    "torchtitan_mxfp8_b200_2025",
    "pytorch_mxfp8_deepep_dsv3_b200_2026",
    *KEMPNERFORGE,
)
#: NeMo AutoModel rows whose benchmark config (named by the source's table, ``examples/llm_benchmark/`` at the
#: source's commit cb976544) sets ``distributed.activation_checkpointing: true``: each transformer block is wrapped
#: in ``checkpoint_wrapper`` (``components/moe/parallelizer.py`` ``apply_ac``, ``components/distributed/
#: parallelizer.py``), i.e. full recompute. Keyed by (model label, GPUs): ``gptoss_20b_te_deepep.yaml`` sets none
#: (default False), ``gptoss_120b_te_deepep.yaml`` sets false. The 1,024-GPU DeepSeek V3 config sets none at
#: cb976544, but only since a refactor: as added (2c236e081, 2025-10-08, two days after the table's row, 89e3a9fdd)
#: ``examples/benchmark/configs/deepseek_v3_te_deepep_1024.yaml`` had ``parallelizer: activation_checkpointing: true``;
#: "refactor distributed configuration" (194103bfc, 2026-02-12) dropped the key from the MoE configs and "reenable
#: activation checkpointing in moe configs" (41646cf39, 2026-02-14) put it back in the 256-GPU file, not this one.
AUTOMODEL_FULL_AC = {
    ("DeepSeek V3 671B", 256): "deepseek/deepseek_v3_te_deepep.yaml",
    ("DeepSeek V3 671B", 1024): "deepseek_v3_te_deepep_1024.yaml as added (2c236e081; dropped by 194103bfc)",
    ("Kimi K2", 256): "kimi/kimi_k2_te_deepep.yaml",
    ("Qwen3 MoE 30B", 8): "qwen/qwen3_moe_30b_te_deepep.yaml",
    ("Llama3 70B", 64): "llama3_3/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml",
}
#: how the Megatron-Core recipe sources name ``--recompute-modules`` (Megatron-MoE-ModelZoo's tables)
MCORE_MODULE_NAMES = {"norm": "layernorm", "act": "moe_act", "attention core": "core_attn"}
#: sources whose attention kernel on Hopper is FlashAttention-2 (:data:`costmodel.frameworks.stacks.FA2_HOPPER_RATIO`)
FA2_STACKS = {
    "torchtitan_2024": "PyTorch SDPA flash backend, which is FlashAttention-2",
    "torchtitan_2025_asynctp": "PyTorch SDPA flash backend, which is FlashAttention-2",
    "llmfoundry_2024": "MPT attn_impl flash: the flash-attn 2 package (ALiBi)",
    "nemo_longseq": "NeMo 24.03.01 container: Transformer Engine 1.4 runs flash-attn 2 when installed",
    "torchao_float8_h100_2025": "torchtitan's Llama: PyTorch SDPA flash backend, which is FlashAttention-2",
    "torchtitan_mxfp8_b200_2025": "torchtitan's Llama: PyTorch SDPA (not Hopper: no change)",
    "torchtitan_perf_a100_2024": "torchtitan's Llama: PyTorch SDPA flash backend (A100: FA2 is the native kernel)",
}
#: torchtitan's "selective layer" activation checkpointing: ``selective_ac_option = '2'`` checkpoints every second
#: transformer block whole ("'int' = ac every positive int layer or 'op', ac based on ops policy": torchtitan's 2024
#: ``train_configs/llama3_8b.toml``, "a preset for 64 A100 GPUs", which also sets ``seq_len = 8192`` and
#: ``compile = false``): recompute ``full`` on half of the layers
TORCHTITAN_AC_EVERY = 2
