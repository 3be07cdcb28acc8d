"""Measured training runs (``benchmarks/data/published_{dev,new}.csv``), as specs.

Two sets: ``dev`` (``published_dev.csv``: A100 Megatron-LM 2020-22, NeMo 24.07 H100 FP8) and
``new`` (``published_new.csv``: issue 10's regimes, 11 sources). :func:`load_set` returns one
:class:`Row` per CSV row, in file order: (model, cluster, workload, config, measured step time,
regimes). A row that cannot be predicted carries ``skip`` (a one-line reason) and is printed
as skipped by the benchmarks, never dropped.

Development set (rules unchanged since issue 3; one rule per *source*, never per row)
---------------------------------------------------------------------------------
* software of the era: Megatron-LM 2020-2022 (``megatron_readme_2020``, ``narayanan2021``,
  ``korthikanti2022``) had unfused attention softmax, no distributed optimizer (ZeRO-0) and no
  overlap of the gradient all-reduce with backward (``bucket_mb=0``; stated for Korthikanti
  Section 6.3). NeMo 24.07 (``nemo_2407``) runs FlashAttention, the distributed optimizer
  (ZeRO-1), bucketed gradient overlap (Megatron-Core's default bucket, 40M elements
  of the FP32 gradient buffer = 160 MB, ``DistributedDataParallelConfig.bucket_size``), sequence parallelism
  when ``tp > 1`` and TP communication overlap (Transformer Engine userbuffers: ``tp`` chunks),
  the defaults of its performance recipes; where the launcher recipe states it, BF16 gradients
  (:data:`NEMO_BF16_GRADS`) and BF16 Adam state without a master copy (Nemotron-340B,
  :data:`NEMO_BF16_OPTIMIZER`);
* micro-batch or interleave factor not stated: the published runs were tuned, so the planner's
  own best value for the stated degrees is used (smallest predicted step time that fits). This
  is the one place a knob is chosen by the planner; in the new set only the same kind of table
  does it (:data:`TUNED_TABLES`, below);
* Megatron README 2020: sequence length not stated, 1024 assumed (GPT-2's), vocabulary 51200,
  full recompute (its TFLOP/s column equals Narayanan's Eq. 3, which counts the recomputed
  forward, at exactly these values: 1B, batch 16, 1.076 s gives 149.8 TFLOP/s).

New set: unstated knobs are the framework's defaults (never chosen to fit)
-------------------------------------------------------------------------
Stated values are always used. What a source leaves out is filled by its framework's default
(or, for NVIDIA's performance tables, by the default of the performance recipes they ran), with
one exception, :data:`TUNED_TABLES`: a tuned showcase table that names no recipe and states
neither micro-batch nor interleave is read with the development set's rule for tables of that
kind (the planner's best micro-batch from 1, 2, 4, 8 and interleave from the divisors of the
layers per stage, for the stated degrees):

* ``megatron_readme_2024``: the Megatron-LM README's weak-scaling table (the same README whose
  2020 table is in the development set, read with the same rule). It states TP, PP, DP and the
  batch, no recipe, no micro-batch and no interleave. Megatron has no default micro-batch, and the
  measured rates rule out micro-batch 1 without interleaving: the 462B row (PP16, 64 micro-batches
  per pipeline) runs at 47% MFU, where a non-interleaved 1F1B bubble alone would cost 19% of the
  step; the 32B row (TP8, 4 sequences per DP rank) reduce-scatters 16 GB of FP32 gradients per GPU
  over its NIC (about 0.35 s) in an 0.89 s step, which only fits under the backward of more than
  one micro-batch's worth of sequences (micro-batch > 1; FP32 reduction: Megatron-LM
  ``arguments.py`` at core_r0.8.0 forces ``accumulate_allreduce_grads_in_fp32`` for BF16).

* **Megatron-Core performance recipes** (``megatron_readme_2024``, ``nemo_longseq``,
  ``megatron_bridge_perf``, ``moe_modelzoo_qwen3``): micro-batch 1 (Megatron has no default;
  every Megatron-Core example script and NeMo/Bridge recipe uses ``--micro-batch-size 1``);
  no interleaving when v is not stated (``--num-layers-per-virtual-pipeline-stage`` unset);
  no recompute when not stated (``--recompute-granularity`` unset); the distributed optimizer
  (ZeRO-1) unless Megatron-FSDP is stated (ZeRO-3); gradient reduce overlapped in buckets of
  Megatron-Core's default size, ``max(40M, 1M x dp)`` FP32 elements
  (``DistributedDataParallel``: BF16 training accumulates and reduces gradients in FP32);
  sequence parallel and TP communication overlap (``tp`` chunks) whenever ``tp > 1`` (stated
  as ``--tp-comm-overlap`` by the 2024 README; on in the recipes; MoE with TP requires SP).
* **Megatron-LM 2023** (``megascale2024`` baseline rows, commit 285068c8): Megatron-LM's
  defaults of that time: no FlashAttention (``--use-flash-attn`` off; MegaScale section 3.3 adopts
  FlashAttention-2 as one of *its* operators), no gradient-reduce overlap (``--overlap-grad-reduce``
  off), no recompute, micro-batch 1; ZeRO-2 and v=6 as stated. Sequence parallel is on: the paper's
  section 1 lists it among the strategies combined, section 3.2 overlaps the SP all-gather and
  reduce-scatter of the baseline's layer (Fig. 3a, "PTB with SP and TP"), and the ablation of Table 3
  goes from the baseline to MegaScale adding "TP overlap" of those collectives, never SP itself; the
  README at 285068c8 passes ``--sequence-parallel`` in its model-parallel example. (Without it the
  plan needs 88-96 GiB of the A100's 80.) The MegaScale-algorithm rows (parallel block,
  sliding-window attention, LAMB) are a different model: skipped.
* **torchtitan** (``torchtitan_2024``, ``torchtitan_2025_asynctp``): FSDP2 with
  ``reshard_after_forward=True`` (ZeRO-3 semantics) when PP is off and ``False`` when PP is on
  (torchtitan ``parallelize_llama.apply_fsdp``: "For PP, do not reshard after forward"),
  modelled as ZeRO-2; no gradient accumulation, so micro-batch = local batch; with PP the local
  batch is split into ``pp`` micro-batches (``pipeline_parallel_microbatches`` default = number of
  stages); an interleaved schedule has 2 stages per rank (``generate_split_points``' default
  for looped schedules); TP uses torchtitan's SequenceParallel plan (``sp`` on); async TP is
  TP overlap with ``tp`` chunks, vanilla TP one chunk; SDPA flash attention; "selective" activation
  checkpointing is torchtitan's per-op policy (``recompute='op_sac'``; ``selective_ac_option = 'op'`` in
  ``train_configs/llama3_8b.toml`` at 327b72b, the config of those Llama 3 8B rows).
* **llm-foundry** (``llmfoundry_2024``): Composer FSDP ``FULL_SHARD`` (ZeRO-3), micro-batch =
  ``device_train_microbatch_size`` as stated, activation checkpointing as stated (full), else none.
* **Llama 3** (``llama3_2024``): FSDP that shards optimizer state and gradients but keeps
  parameters after forward (ZeRO-2, as the paper says), gradients reduce-scattered in every
  micro-batch's backward under PP too (``pp_grad_reduce='microbatch'``: section 3.3.2, "Our use of
  FSDP for Llama 3 shards optimizer states and gradients", "reduce-scatter gradients in FP32 across
  data parallel workers in FSDP"); micro-batch 1 (not stated); the interleave factor
  :data:`LLAMA3_VP` from the paper's split (first and last stage one layer fewer, "the first model
  chunk on the first stage has only the embedding": one layer per virtual stage); TP with sequence
  parallel; no recompute ("we could pre-train Llama 3 on sequences of 8K tokens without activation
  checkpointing").
* **NeMo AutoModel** (``nemo_automodel``): PyTorch FSDP2 with torchtitan's reshard rule for dense models
  (its parallelizer follows torchtitan's); MoE models go through its MoE parallelizer, which does not reshard
  after forward by default (ZeRO-2 under ``fsdp2``, :func:`_zero`); micro-batch as stated; full recompute where the benchmark config
  the source names sets ``activation_checkpointing: true`` (:data:`AUTOMODEL_FULL_AC`), else none.
  Its models are built in bfloat16 (``NeMoAutoModelForCausalLM.from_config``: ``torch_dtype`` "auto" defaults to
  ``torch.bfloat16``, ``_transformers/auto_model.py`` at cb976544) and the benchmark configs' optimizer is
  ``torch.optim.Adam``: BF16 parameters and moments, no FP32 master (``optimizer_dtype='bf16'``).
* Uneven pipelines: layers per stage as even as possible with the deficit on the last stage,
  then the first, alternating inwards (Megatron's ``--account-for-embedding/loss-in-pipeline-split``
  and torchtitan's ``generate_split_points`` both give the end stages fewer layers), with the
  stated ``vp``: a stage's layers need not be a multiple of it
  (:func:`costmodel.spec.stages.chunk_layers` splits them over the ``vp`` model chunks).
* MoE load: ``moe_load_cv = 0`` where the source forced a balanced router (Megatron-Bridge
  "we force-balance the token distribution", the ModelZoo "forced balance" rows, AutoModel's
  "fake balanced gate", token-drop at capacity); otherwise the model's default.

Dropout (both sets): the model preset's ``hidden_dropout`` / ``attention_dropout``, which are its recipe's
(each preset's ``dropout_source``). Megatron-LM runs that state none (README 2020, Narayanan, Korthikanti,
MegaScale's baseline, README 2024, the Megatron-LM CI memory cases) are filled with its defaults, 0.1 each
(``--hidden-dropout``/``--attention-dropout`` ``default=0.1`` in ``arguments.py`` at 9edfdae, 285068c8 and
core_r0.8.0); NeMo 24.07's GPT-3 recipes set 0.1 (``conf/training/gpt3/*.yaml``), its Llama 2/3 and Nemotron
recipes 0.0; the Llama 3, DeepSeek, Qwen3, Mixtral, Kimi, GPT-OSS and MPT rows (Meta's, ModelZoo, Bridge,
AutoModel, torchtitan, llm-foundry) 0.0. At 0.0 no mask is stored or written (:mod:`costmodel.physics.kernels.dropout`).

Measured step time
------------------
``iteration_time_s`` when given; else tokens per batch over ``tokens/s/GPU x GPUs``; else the
published TFLOP/s converted back with the source's own FLOP count (:data:`CONVENTION`):
Narayanan et al. 2021 Eq. 3 (Narayanan, README 2020); Megatron-Core
``num_floating_point_operations`` of r0.8.0 (README 2024: attention counted in full) and of
2025 (Megatron-MoE-ModelZoo: causal attention halved, which reproduces the ModelZoo's own
step-time rows 203-207 within 1%); NeMo's ``flops_formulas.llama2`` (NeMo long-sequence
table; the same count reproduces NeMo 24.07's TFLOP/s and tokens/s of dev rows 123 and 129
within 0.1%); PaLM's ``6N + 12 L H Q T`` (Chowdhery et al. 2022, Appendix B; Llama 3's "BF16 MFU").
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from costmodel.frameworks.stacks import FA2_HOPPER_RATIO, fa2_device
from costmodel.spec.plan import RECOMPUTE_MODULES, ParallelConfig
from costmodel.spec.errors import PlannerError
from costmodel.training.estimate import Estimate
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

from benchmarks.regimes import regimes_of

DATA = Path(__file__).parent / "data" / "published_dev.csv"
DATA_NEW = Path(__file__).parent / "data" / "published_new.csv"
#: the sealed test split (issue 20): sources moved out of the new set by a rule on their key, never by
#: their errors (``benchmarks/data/sealed/README.md``). Loaded only when asked for by name; ``all`` is
#: the development and new sets, what the model is developed and fitted on.
DATA_SEALED = Path(__file__).parent / "data" / "sealed" / "published_sealed.csv"
SETS = {"dev": DATA, "new": DATA_NEW, "sealed": DATA_SEALED}

MODEL_PRESET = {
    # development set
    "GPT 1.7B": "gpt-1.7b", "GPT 3.6B": "gpt-3.6b", "GPT 7.5B": "gpt-7.5b", "GPT 18.4B": "gpt-18.4b",
    "GPT 39.1B": "gpt-39.1b", "GPT 76.1B": "gpt-76.1b", "GPT 145.6B": "gpt-145.6b",
    "GPT 310.1B": "gpt-310.1b", "GPT 529.6B": "gpt-529.6b", "GPT 1008.0B": "gpt-1t",
    "GPT 22B": "gpt-22b", "GPT 175B (GPT-3)": "gpt3-175b", "GPT 530B (MT-NLG)": "gpt-530b", "GPT 1T": "gpt-1t",
    "GPT-2-style 1B": "gpt-2-1b", "GPT-2-style 2B": "gpt-2-2b", "GPT-2-style 4B": "gpt-2-4b",
    "GPT-2-style 8B": "gpt-2-8b",
    "GPT3-5B": "gpt3-5b", "GPT3-20B": "gpt3-20b", "GPT3-175B": "gpt3-175b", "LLAMA2-7B": "llama2-7b",
    "LLAMA2-13B": "llama2-13b", "LLAMA2-70B": "llama2-70b", "Nemotron-8B": "nemotron-8b",
    "Nemotron-22B": "nemotron-22b", "Nemotron-340B": "nemotron4-340b", "LLAMA3-8B": "llama3-8b",
    "LLAMA3-70B": "llama3-70b",
    # new set
    "GPT 1.7B (Megatron weak-scaling)": "mcore-gpt-1.7b", "GPT 7.1B (Megatron weak-scaling)": "mcore-gpt-7.1b",
    "GPT 16B (Megatron weak-scaling)": "mcore-gpt-16b", "GPT 32B (Megatron weak-scaling)": "mcore-gpt-32b",
    "GPT 70B (Megatron weak-scaling)": "mcore-gpt-70b", "GPT 119B (Megatron weak-scaling)": "mcore-gpt-119b",
    "GPT 177B (Megatron weak-scaling)": "mcore-gpt-177b", "GPT 314B (Megatron weak-scaling)": "mcore-gpt-314b",
    "GPT 462B (Megatron weak-scaling)": "mcore-gpt-462b", "GPT 177B (GPT-3 shape, vocab 131072)": "mcore-gpt-177b",
    "Llama 3 405B": "llama3.1-405b", "GPT 175B (MegaScale Table 1)": "megascale-gpt-175b",
    "Llama 3.1 8B": "llama3.1-8b", "Llama 3.1 70B": "llama3.1-70b", "Llama 3.1 405B": "llama3.1-405b",
    "Llama 3 70B": "llama3-70b", "Llama 3 8B": "llama3-8b", "Llama3 70B": "llama3-70b",
    "MPT-3B": "mpt-3b", "MPT-7B": "mpt-7b", "MPT-13B": "mpt-13b", "MPT-30B": "mpt-30b", "MPT-70B": "mpt-70b",
    "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b", "LLAMA3_8B": "llama3-8b",
    "GPT OSS 120B": "gpt-oss-120b", "GPT-OSS 120B": "gpt-oss-120b", "GPT-OSS 20B": "gpt-oss-20b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3 MoE 30B": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b", "Qwen3_235B_a22B (tokendrop)": "qwen3-235b-a22b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "DeepSeekV3 (dropless)": "deepseek-v3", "DeepSeek V3 671B": "deepseek-v3", "DeepSeek-V3 (pre-training)": "deepseek-v3",
    "Kimi K2": "kimi-k2",
}
#: model labels with no preset on purpose: the reason is the row's skip
NOT_MODELLED = {
    "GPT 175B (MegaScale Table 1) - MegaScale algorithm":
        "MegaScale algorithm (parallel attention/MLP block, sliding-window attention, LAMB) is not the standard model",
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
BRIDGE_FP8_PARAMS = "megatron_bridge_perf"
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
    ("DeepSeekV3", "H100"): dict(recompute="selective", recompute_modules=("mla_up_proj", "mlp"),
                                 layout="Et|(tt|)*30mL", grad_dtype="bf16"),
}
MCORE_RECIPES = ("megatron_readme_2024", "nemo_longseq", "megatron_bridge_perf", "moe_modelzoo_qwen3")
#: new-set sources whose unstated micro-batch and interleave are chosen by the planner (the development
#: set's rule for tuned tables; module docstring, "New set")
TUNED_TABLES = ("megatron_readme_2024",)
TORCHTITAN = ("torchtitan_2024", "torchtitan_2025_asynctp")
#: the framework that ran each new-set source (costmodel.frameworks.rules); unlisted: Megatron-Core / Megatron-LM
FRAMEWORK = {
    "torchtitan_2024": "fsdp2", "torchtitan_2025_asynctp": "fsdp2",  # torchtitan: FSDP2
    "nemo_automodel": "fsdp2",  # AutoModel: PyTorch-native FSDP2 trainer (its parallelizer follows torchtitan's)
    "llmfoundry_2024": "fsdp2",  # Composer FSDP FULL_SHARD: per-module gather in forward and backward, RS per micro-batch
    "llama3_2024": "fsdp2",  # Meta's FSDP, parameters not resharded after forward (zero=2 under fsdp2)
}
#: sources that ran PyTorch FSDP2 (``fully_shard``: per-parameter copy-out after each all-gather, gradient copy-in
#: before each reduce-scatter, ``ParallelConfig.fsdp_copies``); llm-foundry's Composer wraps FSDP1 (``FlatParameter``:
#: parameters are views of the gathered buffer) and Meta's Llama 3 FSDP is not PyTorch's: no copies charged
FSDP2_COPIES = ("torchtitan_2024", "torchtitan_2025_asynctp", "nemo_automodel")
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
}


@dataclass
class Row:
    row_id: str
    source: str
    label: str
    model: object
    cluster: object
    workload: Workload
    fixed: dict  # stated config fields (and, for the new set, framework defaults)
    free: dict  # unstated fields: candidate values to choose from (development set only)
    measured_s: float | None
    skip: str = ""
    set: str = "dev"
    gpus: int = 0
    regimes: tuple = ()
    notes: list = field(default_factory=list)  # how unstated knobs were filled, approximations
    measured_how: str = ""

    def plan_options(self) -> tuple:
        """The run's plan options (:data:`search.problem.PLAN_OPTIONS`: its numerics, dispatcher, ...) as a
        search ``Problem`` takes them: what a search for this run keeps as the run had it."""
        from search.problem import PLAN_OPTIONS
        return tuple((k, self.fixed[k]) for k in PLAN_OPTIONS if k in self.fixed)


def _num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _int(x, default=None):
    v = _num(x)
    return int(v) if v is not None else default


# ---------------------------------------------------------------- FLOP conventions (per step)
def flops_narayanan_eq3(model, batch: int, seq: int) -> float:
    """Narayanan et al. 2021 (arXiv 2104.04473) Eq. 3: GEMM FLOPs incl. the recompute forward."""
    B, s, l, h, V = batch, seq, model.layers, model.hidden, model.vocab
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def flops_megatron_core(model, batch: int, seq: int, causal: bool = False) -> float:
    """Megatron-Core ``training.num_floating_point_operations``: model FLOPs (no recompute).

    ``12 B s L h^2 [ (1 + g/a + s/h) q/h + (f/h) k_routed m_gated + (f_sh/h) m_gated + V/(2Lh) ]``
    with q = heads x head_dim, g/a = kv_heads/heads, k_routed = top-k (1 for dense), m_gated = 3/2
    for SwiGLU. r0.8.0 (the 2024 README) counts attention in full; the 2025 version
    (``transformer_flops``, "causal mask (only half of the mask is non-zero)") halves the s/h term.
    MoE layers and leading dense layers are averaged over L. MLA is not covered (not needed:
    no MLA row is converted from TFLOP/s)."""
    if model.is_mla:
        raise ValueError("Megatron-Core MLA FLOP count not implemented")
    B, s, L, h = batch, seq, model.layers, model.hidden
    q_ratio = model.heads * model.head_dim / h
    gated = 1.5 if model.activation == "swiglu" else 1.0
    if model.is_moe:
        dense, moe = model.dense_layers, L - model.dense_layers
        per_moe = model.moe_ffn_hidden * (model.topk + model.shared_experts)
        mlp = (dense * model.ffn_hidden + moe * per_moe) / L / h * gated
    else:
        mlp = model.ffn_hidden / h * gated
    attn = (1 + model.kv_heads / model.heads + s / h / (2 if causal else 1)) * q_ratio
    return 12 * B * s * L * h * h * (attn + mlp + model.vocab / (2 * L * h))


def flops_nemo_llama(model, batch: int, seq: int) -> float:
    """NeMo ``utils/flops_formulas.llama2`` (GQA Llama, attention counted in full):
    ``gbs s L h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(L h))``."""
    B, s, L, h = batch, seq, model.layers, model.hidden
    g = model.kv_heads / model.heads
    return B * s * L * h * h * (12 + 12 * g + 18 * model.ffn_hidden / h + 12 * s / h + 6 * model.vocab / (L * h))


def flops_palm(model, batch: int, seq: int) -> float:
    """PaLM (Chowdhery et al. 2022, Appendix B) model FLOPs: ``(6N + 12 L H Q T)`` per token,
    N = all parameters, H x Q = heads x head_dim, T = sequence (attention counted in full)."""
    per_token = 6 * model.params + 12 * model.layers * model.heads * model.head_dim * seq
    return batch * seq * per_token


#: source -> (FLOP count used by its TFLOP/s column, name); None: the source gives no usable rate
CONVENTION = {
    "narayanan2021": (flops_narayanan_eq3, "Narayanan 2021 Eq. 3"),
    "megatron_readme_2020": (flops_narayanan_eq3, "Narayanan 2021 Eq. 3"),
    "megatron_readme_2024": (lambda m, B, s: flops_megatron_core(m, B, s, causal=False),
                             "Megatron-Core r0.8.0 num_floating_point_operations"),
    "moe_modelzoo_qwen3": (lambda m, B, s: flops_megatron_core(m, B, s, causal=True),
                           "Megatron-Core 2025 num_floating_point_operations (causal)"),
    "nemo_longseq": (flops_nemo_llama, "NeMo flops_formulas.llama2"),
    "nemo_2407": (flops_nemo_llama, "NeMo flops_formulas.llama2"),
    "llama3_2024": (flops_palm, "PaLM 6N + 12LHQT"),
}


def measured_step_s(r: dict, model, seq: int, gpus: int, batch: int) -> tuple[float | None, str]:
    """Measured seconds per step of CSV row ``r`` and how it was obtained."""
    if _num(r["iteration_time_s"]):
        return float(r["iteration_time_s"]), "iteration time"
    if _num(r["tokens_per_sec_per_gpu"]) and _num(r["tokens_per_batch"]):
        return float(r["tokens_per_batch"]) / (float(r["tokens_per_sec_per_gpu"]) * gpus), "tokens/s/GPU"
    conv = CONVENTION.get(r["source_key"])
    if _num(r["tflops_per_gpu"]) and conv and model is not None:
        fn, name = conv
        return fn(model, batch, seq) / (float(r["tflops_per_gpu"]) * 1e12 * gpus), f"TFLOP/s via {name}"
    return None, ""


# ---------------------------------------------------------------- pipeline layout
def stage_layout(layers: int, pp: int, vp: int) -> tuple[int, tuple[int, ...] | None]:
    """``(vp, layers per stage)`` for ``layers`` on ``pp`` stages with interleave ``vp``.

    Uniform when ``pp*vp`` divides ``layers`` (layout ``None``). Otherwise every stage gets
    ``ceil(layers/pp)`` layers and one layer at a time is taken back from the last stage, the
    first, the second-last, ... until the sum is ``layers``; ``vp`` is kept as stated (a stage's
    layers need not be a multiple of it: :func:`costmodel.spec.stages.chunk_layers`).

    >>> stage_layout(126, 8, 1)
    (1, (15, 16, 16, 16, 16, 16, 16, 15))
    >>> stage_layout(126, 8, 8)
    (8, (15, 16, 16, 16, 16, 16, 16, 15))
    >>> stage_layout(96, 8, 6), stage_layout(96, 8, 5)[1][0], stage_layout(61, 8, 4)
    ((6, None), 12, (4, (7, 8, 8, 8, 8, 8, 7, 7)))
    """
    if pp == 1:
        return 1, None
    if layers % (pp * vp) == 0:
        return vp, None
    most = math.ceil(layers / pp)
    stages = [most] * pp
    order = [i for k in range(pp // 2 + 1) for i in (pp - 1 - k, k)]
    order = list(dict.fromkeys(i for i in order if 0 <= i < pp))
    for i in range(most * pp - layers):
        stages[order[i % pp]] -= 1
    return vp, tuple(stages)


# ---------------------------------------------------------------- development set
def _dev_row(r: dict) -> Row:
    src = r["source_key"]
    model = load_model(MODEL_PRESET[r["model"]])
    gpus = int(float(r["num_gpus"]))
    gpu = r["gpu_type"]
    cluster = load_cluster("h100-sxm" if "H100" in gpu else
                           ("a100-40g" if src == "megatron_readme_2020" else "a100-80g")).with_gpus(gpus)
    seq = int(float(r["seq_len"])) if _num(r["seq_len"]) else 1024
    tp, pp = int(float(r["tp"])), int(float(r["pp"]))
    cp = int(float(r["cp"])) if _num(r["cp"]) else 1
    dp = gpus // (tp * pp * cp)
    batch = int(r["global_batch"]) if _num(r["global_batch"]) else None
    dtype = "fp8" if r["precision"] == "FP8" else "bf16"
    era = src in MEGATRON_ERA
    rec = r["recompute"]
    fixed = dict(tp=tp, pp=pp, dp=dp, cp=cp,
                 sp=(r["sp"] == "yes") if r["sp"] in ("yes", "no") else (not era and tp > 1),
                 recompute="full" if rec.startswith("full") or src == "megatron_readme_2020"
                 else ("selective" if rec.startswith("selective") else "none"),
                 zero=0 if era else 1, flash_attention=not era,
                 bucket_bytes=0 if era else 160e6, chunks=tp if (not era and tp > 1) else 1,
                 grad_dtype="fp16" if src in FP16_GRADS else ("bf16" if nemo_bf16_grads(src, r["model"]) else "fp32"))
    free = {}
    if _num(r["micro_batch"]):
        fixed["mb"] = int(float(r["micro_batch"]))
    else:
        free["mb"] = [1, 2, 4, 8]
    vp = r["vp"].split(" ")[0]
    if _num(vp):
        fixed["vp"] = int(float(vp))
    elif pp > 1 and ("interleaved" in r["vp"] or "not stated" in r["vp"]):
        per = model.layers // pp
        free["vp"] = [v for v in range(1, per + 1) if per % v == 0]
    else:
        fixed["vp"] = 1
    skip = "" if batch else "global batch not stated"
    wl = Workload(global_batch=batch or 1, seq_len=seq, dtype=dtype)
    measured, how = measured_step_s(r, model, seq, gpus, batch or 1) if batch else (None, "")
    if measured is None and not skip:
        skip = "no step time, throughput or TFLOP/s stated"
    notes = [f"{k} chosen by the planner from {v}" for k, v in free.items()]
    if src in FP16_GRADS:
        notes.append("FP16 gradients reduced (Megatron-LM of the era, FP16 without FP32 all-reduce: FP16_GRADS)")
    if nemo_bf16_grads(src, r["model"]):
        notes.append("BF16 gradient buffer: grad_sync_dtype=bf16 in the NeMo launcher's H100 recipe (NEMO_BF16_GRADS)")
    if any(r["model"].startswith(p) for p in NEMO_BF16_OPTIMIZER.get(src, ())) and fixed["zero"] == 1:
        fixed["optimizer_dtype"] = "bf16"
        notes.append("optimizer_dtype bf16: distributed_fused_adam with optim.dtype bf16 in the NeMo launcher's "
                     "recipe, no master copy (NEMO_BF16_OPTIMIZER)")
    row = Row(r["row_id"], src, r["model"], model, cluster, wl, fixed, free, measured, skip,
              set="dev", gpus=gpus, notes=notes, measured_how=how)
    vp_reg = fixed.get("vp", 1)
    row.regimes = regimes_of(dict(gpu=cluster.device.name, dtype=dtype, experts=model.experts, topk=model.topk,
                                  ep=1, gpus=gpus, cp=cp, seq=seq, layers=model.layers, pp=pp, vp=vp_reg,
                                  sharding="megatron", zero=fixed["zero"]))
    return row


# ---------------------------------------------------------------- new set
def _cluster_name(gpu: str) -> str:
    g = gpu.upper()
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
    if src == "llmfoundry_2024":
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


def _new_row(r: dict, set_name: str = "new") -> Row:
    src, label = r["source_key"], r["model"]
    gpus = _int(r["num_gpus"])
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
    seq = _int(r["seq_len"])
    batch = _int(r["global_batch"])
    tp, pp, cp, ep = _int(r["tp"]), _int(r["pp"]), _int(r["cp"], 1), _int(r["ep"], 1)
    if (src == "nemo_automodel" and not _num(r["ep"]) and _int(r["moe_experts"], 0)
            and "deepep" in r["other_metric"].lower()):
        # AutoModel's table prints EP '-' for the GPT-OSS rows, but they run DeepEP (an EP dispatcher) and
        # the benchmark configs it names set ep_size to the whole job (examples/llm_benchmark/gpt_oss/
        # gptoss_20b_te_deepep.yaml: ep_size 8 on 8 GPUs; gptoss_120b_te_deepep.yaml: ep_size 64 on 64)
        ep = gpus // ((tp or 1) * (pp or 1) * cp)
        notes.append(f"ep {ep}: EP '-' in the table; DeepEP runs and the named benchmark config sets ep_size = GPUs")
    dtype = "fp8" if r["precision"] == "FP8" else "bf16"
    if tp is None or pp is None:
        skip = skip or "TP/PP not stated (strong-scaling end point)"
        tp, pp = tp or 1, pp or 1
    dp = _int(r["dp"]) or _int(r["derived_dp"]) or gpus // (tp * pp * cp)
    if not _num(r["dp"]) and _num(r["derived_dp"]):
        notes.append("dp from derived_dp (the printed DP is inconsistent with the GPU count)")
    if tp * pp * dp * cp != gpus and not skip:
        skip = f"tp*pp*dp*cp = {tp * pp * dp * cp} != {gpus} GPUs"
    if src == "deepseek_v3_2024":
        skip = skip or ("measured value is the whole-run average GPU-hour cost (batch ramp, restarts), not a "
                        "step; DualPipe schedule not modelled")
    vp_text = r["vp"].strip()
    vp = _int(vp_text.split(" ")[0])
    if vp is None and src == "llama3_2024" and pp == 16 and model is not None and model.layers == 126:
        vp = LLAMA3_VP
        notes.append(f"v {LLAMA3_VP}: the paper's first chunk holds only the embedding once the first stage has one "
                     "layer fewer (section 3.3.2), so each virtual stage holds one layer: (126 + 2) / 16")
    if vp is None:
        if "interleaved" in vp_text:
            vp = 2
            notes.append("v not stated for an interleaved schedule: 2")
        else:
            vp = 1
    mb = _int(r["micro_batch"])
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
            notes.append(f"mb {mb} = local batch / {pp} pipeline micro-batches (torchtitan default)" if pp > 1
                         else f"mb {mb} = local batch (no accumulation)")
        else:
            mb = 1
            notes.append("mb 1 (not stated)")
    rec = r["recompute"].lower()
    recompute = "full" if rec.startswith("full") else ("selective" if rec.startswith("selective") else "none")
    if src == "nemo_automodel" and not rec and (label, gpus) in AUTOMODEL_FULL_AC:
        recompute = "full"
        notes.append(f"full recompute: activation_checkpointing true in {AUTOMODEL_FULL_AC[label, gpus]} (the named config)")
    elif not rec:
        notes.append("no recompute (not stated)")
    if src in TORCHTITAN and recompute == "selective":
        # torchtitan's selective AC is per-op (selective_ac_option 'op': train_configs/llama3_8b.toml at 327b72b,
        # the config of these Llama 3 8B rows; rows 151/152 state "per-op SAC"), not Megatron's attention-only
        recompute = "op_sac"
        notes.append("selective = torchtitan per-op SAC (recompute op_sac; selective_ac_option 'op')")
    modules, extra = None, {}
    if recompute == "selective" and src in MCORE_RECIPES and "(" in rec:
        # Megatron-Core --recompute-modules as the source lists them, e.g. "selective (layernorm, moe)"
        named = tuple(MCORE_MODULE_NAMES.get(m.strip(), m.strip()) for m in rec.split("(", 1)[1].rstrip(")").split(","))
        if all(m in RECOMPUTE_MODULES for m in named):
            modules = named
            notes.append(f"--recompute-modules {' '.join(named)} (stated)")
        else:
            notes.append(f"recompute modules {', '.join(named)} stated; not all modelled "
                         f"({', '.join(RECOMPUTE_MODULES)}): charged as Megatron's default (core attention)")
    zero = _zero(src, r["zero_or_sharding"], pp, notes, moe=bool(_int(r["moe_experts"], 0)))
    megatron_2023 = src == "megascale2024"
    if src in MCORE_RECIPES:
        sp, chunks = tp > 1, (tp if tp > 1 else 1)
        bucket = max(40e6, 1e6 * dp) * 4  # Megatron-Core default bucket, FP32 gradient elements
    elif megatron_2023:
        sp, chunks, bucket = tp > 1, 1, 0  # SP on, no TP overlap (MegaScale's own): module docstring
    else:
        sp = tp > 1
        chunks = tp if (tp > 1 and "async tp" in r["other_metric"].lower()) else 1
        bucket = ParallelConfig().bucket_bytes
    framework = FRAMEWORK.get(src, "megatron")
    fused = True
    if src in TORCHTITAN and "torch.compile no" in r["other_metric"].lower():
        fused = False  # torchtitan training.compile off: the Llama block's norms, RoPE, SwiGLU run eager
        notes.append("torch.compile off (stated): eager element-wise kernels (fused_elementwise False)")
    other = r["other_metric"].lower()
    dispatcher = "deepep" if "deepep" in other else "alltoall"
    if dispatcher == "deepep" and ep > 1:
        notes.append("DeepEP dispatcher (stated): one network copy per destination node")
    if "hybridep" in other and ep > 1:
        notes.append("HybridEP backend (in the recipe): not modelled, charged as the all-to-all dispatcher")
    if ep > 1 and ("moe_a2a_overlap true" in other or "1f1b overlap" in other):
        # Megatron-Core --overlap-moe-expert-parallel-comm: one micro-batch's all-to-all behind another's compute
        notes.append("EP all-to-all overlap ran (stated, or in the recipe): not modelled, the all-to-all is charged without it")
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
    if src == BRIDGE_FP8_PARAMS and dtype == "fp8" and "blockwise" not in r["notes"].lower():
        extra["fp8_param_gather"] = True
        notes.append("fp8_param_gather (the Bridge FP8 recipes' FP8 parameters: BRIDGE_FP8_PARAMS)")
    for (prefix, gpu), recipe in BRIDGE_2509_RECIPES.items():
        if src == "megatron_bridge_perf" and label.startswith(prefix) and gpu in r["gpu_type"] and not rec:
            extra.update(recipe)
            notes.append(f"{', '.join(f'{k} {v}' for k, v in recipe.items())}: the Bridge 25.09 performance script "
                         "for this model and GPU (BRIDGE_2509_RECIPES)")
    if src == "nemo_automodel" and model is not None and model.mtp_layers:
        # AutoModel's DeepseekV3Model builds num_hidden_layers blocks and no MTP module (nemo_automodel/components/
        # models/deepseek_v3/model.py@cb976544); Megatron-Bridge's recipe sets cfg.model.mtp_num_layers = 1
        # (src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py@067f987d): those rows keep the model's
        model = replace(model, mtp_layers=0)
        notes.append("mtp_layers 0: AutoModel's DeepSeek-V3 has no MTP module")
    if src == "llama3_2024" and framework == "fsdp2" and zero == 2 and pp > 1:
        extra["pp_grad_reduce"] = "microbatch"
        notes.append("pp_grad_reduce microbatch: the paper's FSDP 'shards optimizer states and gradients' and "
                     "reduce-scatters them in FP32 (section 3.3.2): ZeRO-2 under PP, not torch.distributed.pipelining's "
                     "once-per-step sync")
    if src == "llama3_2024" and framework == "fsdp2" and tp > 1 and sp:
        # not stated: the paper names no TP implementation. Under PyTorch DTensor SP (the fsdp2 default, 'gathered')
        # the QKV and MLP inputs are saved whole, and the 8K run it reports "without activation checkpointing"
        # (section 3.3.2) could not have fit in 80 GiB (rows 113/114: 73.8 -> 132.6 GiB): inferred from that statement
        extra["sp_saved_inputs"] = "sharded"
        notes.append("sp_saved_inputs sharded: Meta's own TP, not DTensor; the paper's no-checkpointing 8K run does "
                     "not fit with the GEMM inputs saved all-gathered (inferred, not stated)")
    if src == "llama3_2024" and pp > 1:
        extra["pp_free_stage_inputs"] = True
        notes.append("pp_free_stage_inputs: 'we proactively deallocate tensors that will not be used for future "
                     "computation, including the input and output tensors of each pipeline stage' (section 3.3.2)")
    if src == "nemo_automodel":
        extra["optimizer_dtype"] = "bf16"
        notes.append("optimizer_dtype bf16: AutoModel builds the model in bfloat16 (from_config torch_dtype 'auto' "
                     "-> bfloat16) and the configs' torch.optim.Adam updates it in place")
    if nemo_bf16_grads(src, label):
        extra["grad_dtype"] = "bf16"
        notes.append("BF16 gradient buffer: grad_sync_dtype=bf16 in the NeMo launcher's H100 recipes (NEMO_BF16_GRADS)")
    fixed = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sp=sp, mb=mb or 1, recompute=recompute, zero=zero,
                 flash_attention=not megatron_2023, bucket_bytes=bucket, chunks=chunks, vp=vp, framework=framework,
                 fused_elementwise=fused, ep_dispatcher=dispatcher, cp_impl=cp_impl)
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
            balanced = (src == "megatron_bridge_perf" or src == "nemo_automodel" or "forced balance" in other)
            if balanced:
                model = replace(model, moe_load_cv=0.0)
                notes.append("moe_load_cv 0 (source forced a balanced router / token drop)")
            if src == "nemo_automodel":
                # every AutoModel benchmark config of these rows sets backend fake_balanced_gate: true (noise 0):
                # FakeBalancedGate routes token t to experts t*k .. t*k+k-1 mod E (nemo_automodel/components/moe/
                # layers.py@cb97654), neighbouring experts on one or two ranks (costmodel.physics.comm.ep_dispatch.fanout)
                model = replace(model, moe_routing="consecutive")
                notes.append("moe_routing consecutive: AutoModel's FakeBalancedGate (fake_balanced_gate: true)")
    if batch is None:
        skip = skip or "global batch not stated"
    elif dp and batch % dp:
        skip = skip or (f"global batch {batch} is not a multiple of dp {dp}: the source's DP, GPU and batch "
                        "columns disagree")
    if cluster is not None and src in FA2_STACKS and (src != "nemo_longseq" or "H100" in r["gpu_type"]):
        fa2 = fa2_device(cluster.device)
        if fa2 is not cluster.device:
            cluster = replace(cluster, device=fa2)
            notes.append(f"attention kernel FlashAttention-2 ({FA2_STACKS[src]}): {FA2_HOPPER_RATIO} x the "
                         "preset's cuDNN-class attention efficiency")
    wl = Workload(global_batch=batch or 1, seq_len=seq or 1, dtype=dtype)
    measured, how = (None, "")
    if model is not None and batch:
        measured, how = measured_step_s(r, model, seq, gpus, batch)
    if measured is None and not skip:
        skip = "no step time, throughput or TFLOP/s with a known FLOP convention"
    layers = model.layers if model is not None else _int(r["layers"])
    for k in free:
        fixed.pop(k, None)
    row = Row(r["row_id"], src, label, model, cluster, wl, fixed, free, measured, skip, set=set_name, gpus=gpus,
              notes=notes, measured_how=how)
    row.regimes = regimes_of(dict(
        gpu=cluster.device.name if cluster else r["gpu_type"], dtype=dtype,
        experts=_int(r["moe_experts"], 0), topk=_int(r["moe_topk"], 0), ep=ep, gpus=gpus, cp=cp, seq=seq or 0,
        layers=layers, pp=pp, vp=regime_vp, sharding=r["zero_or_sharding"], zero=zero))
    return row


def load_rows(path: Path = DATA) -> list[Row]:
    """Every row of one CSV file (the development set by default), skipped rows included."""
    name = Path(path).name
    kind = "sealed" if "published_sealed" in name else "new" if "published_new" in name else "dev"
    with open(path, newline="") as f:
        return [_dev_row(r) if kind == "dev" else _new_row(r, kind) for r in csv.DictReader(f)]


def load_set(name: str = "all") -> list[Row]:
    """Rows of the ``dev`` set, the ``new`` set, ``all`` (dev first, then new) or the ``sealed`` split
    (never part of ``all``: it is scored once, at the end of an issue)."""
    if name not in ("dev", "new", "all", "sealed"):
        raise ValueError(f"set={name!r}: must be dev, new, all or sealed")
    names = ("dev", "new") if name == "all" else (name,)
    return [r for n in names for r in load_rows(SETS[n])]


def predict(row: Row, engine: str = "graph") -> tuple[Estimate | None, str]:
    """Best estimate over the unstated fields (fits first, then fastest), by ``engine``.
    New-set rows have no free fields (one evaluation of the filled plan) except those of
    :data:`TUNED_TABLES`."""
    best, why = None, ""
    keys = list(row.free)
    for values in itertools.product(*(row.free[k] for k in keys)):
        cfg = dict(row.fixed, **dict(zip(keys, values)))
        try:
            est = evaluate(row.model, row.cluster, row.workload, ParallelConfig(**cfg), engine=engine)
        except PlannerError as e:
            why = str(e)
            continue
        if best is None or (est.fits, -est.step_time_s) > (best.fits, -best.step_time_s):
            best = est
    return best, "" if best else (why or "no valid config for the stated degrees")


def write_csv(path: str, rows: list[dict]) -> None:
    """Per-row results of a validation benchmark as CSV (``--csv``)."""
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
