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

* **Issue 39** (Blackwell, the Megatron-Core MoE stack): GB300 / GB200 / B300 / B200 map to the presets
  ``gb300-nvl72`` / ``gb200-nvl72`` / ``b300`` / ``b200``; the Bridge tables' Blackwell rows
  (``megatron_bridge_perf_blackwell``), the ModelZoo's GB200/GB300 tables and the Megatron-LM GB200 guide are
  Megatron-Core recipes (:data:`MCORE_RECIPES`); HybridEP stated is ``ep_dispatcher='hybridep'``; a precision stated
  as ``MXFP8`` / ``NVFP4`` (:data:`BLOCK_SCALED`) is that dtype where the planner has it, else the row is skipped
  (never charged as per-tensor FP8).

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

The modules
-----------
:mod:`.sources` (what each source leaves to its software, and the sets' CSV files), :mod:`.cells` (a
row's CSV cells), :mod:`.measured` (the measured step time, the sources' FLOP counts), :mod:`.layout`
(uneven pipelines), :mod:`.row` (:class:`Row` and :func:`predict`), :mod:`.dev_rows` and
:mod:`.new_rows` (each set's rules); the sets are loaded here (:func:`load_set`).
"""

from __future__ import annotations

import csv
from pathlib import Path

from .cells import cell_int, cell_num
from .dev_rows import dev_row
from .layout import stage_layout
from .measured import (
    CONVENTION,
    flops_megatron_core,
    flops_nemo_llama,
    flops_narayanan_eq3,
    flops_palm,
    measured_step_s,
)
from .new_rows import new_row
from .row import Row, predict
from .sources import (
    AUTOMODEL_FULL_AC,
    BLOCK_SCALED,
    BRIDGE_2509_RECIPES,
    BRIDGE_2511_RECIPES,
    BRIDGE_BF16_GRADS,
    BRIDGE_FP8_PARAMS,
    BRIDGE_TABLES,
    BRIDGE_TE_LOSS,
    DATA,
    DATA_NEW,
    DATA_SEALED,
    DATA_SPENT,
    FA2_STACKS,
    FP16_GRADS,
    FRAMEWORK,
    FSDP2_COPIES,
    LLAMA3_VP,
    MCORE_MODULE_NAMES,
    MCORE_RECIPES,
    MEGATRON_ERA,
    MODEL_PRESET,
    MXFP8_PARAMS,
    NEMO_BF16_GRADS,
    NEMO_BF16_OPTIMIZER,
    NOT_MODELLED,
    SETS,
    SEALED_BEFORE_39,
    SOURCES_39,
    SOURCES_39B,
    SOURCES_BEFORE_38,
    SOURCES_BEFORE_39,
    SPENT_39,
    TORCHTITAN,
    TUNED_TABLES,
    nemo_bf16_grads,
)

_dev_row, _new_row = dev_row, new_row  # their former names (tests/test_published_fit.py reads ``_new_row``)


def load_rows(path: Path = DATA) -> list[Row]:
    """Every row of one CSV file (the development set by default), skipped rows included."""
    name = Path(path).name
    kinds = {"published_sealed": "sealed", "published_spent": "spent", "published_new": "new"}
    kind = next((k for stem, k in kinds.items() if stem in name), "dev")
    with open(path, newline="") as f:
        return [dev_row(r) if kind == "dev" else new_row(r, kind) for r in csv.DictReader(f)]


def load_set(name: str = "all") -> list[Row]:
    """Rows of the ``dev`` set, the ``new`` set, ``all`` (dev first, then new), the ``sealed`` split (never
    part of ``all``: it is scored once, at the end of an issue) or the ``spent`` split (issue 20's sealed split,
    scored once, never part of ``all``)."""
    if name not in ("dev", "new", "all", "sealed", "spent"):
        raise ValueError(f"set={name!r}: must be dev, new, all, sealed or spent")
    names = ("dev", "new") if name == "all" else (name,)
    return [r for n in names for r in load_rows(SETS[n])]


def write_csv(path: str, rows: list[dict]) -> None:
    """Per-row results of a validation benchmark as CSV (``--csv``)."""
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)


__all__ = [
    "AUTOMODEL_FULL_AC",
    "BLOCK_SCALED",
    "BRIDGE_2509_RECIPES",
    "BRIDGE_2511_RECIPES",
    "BRIDGE_BF16_GRADS",
    "BRIDGE_FP8_PARAMS",
    "BRIDGE_TABLES",
    "BRIDGE_TE_LOSS",
    "CONVENTION",
    "DATA",
    "DATA_NEW",
    "DATA_SEALED",
    "DATA_SPENT",
    "FA2_STACKS",
    "FP16_GRADS",
    "FRAMEWORK",
    "FSDP2_COPIES",
    "LLAMA3_VP",
    "MCORE_MODULE_NAMES",
    "MCORE_RECIPES",
    "MEGATRON_ERA",
    "MODEL_PRESET",
    "MXFP8_PARAMS",
    "NEMO_BF16_GRADS",
    "NEMO_BF16_OPTIMIZER",
    "NOT_MODELLED",
    "SETS",
    "SEALED_BEFORE_39",
    "SOURCES_39",
    "SOURCES_39B",
    "SOURCES_BEFORE_38",
    "SOURCES_BEFORE_39",
    "SPENT_39",
    "TORCHTITAN",
    "TUNED_TABLES",
    "Row",
    "cell_int",
    "cell_num",
    "dev_row",
    "flops_megatron_core",
    "flops_narayanan_eq3",
    "flops_nemo_llama",
    "flops_palm",
    "load_rows",
    "load_set",
    "measured_step_s",
    "nemo_bf16_grads",
    "new_row",
    "predict",
    "stage_layout",
    "write_csv",
]
