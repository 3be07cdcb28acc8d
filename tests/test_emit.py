"""Emitted Megatron-LM arguments and DeepSpeed JSON use the frameworks' documented names and types.

Sources of the documented lists below (checked by hand against the code):

* Megatron-LM ``megatron/training/arguments.py`` (NVIDIA/Megatron-LM, 2024-2025):
  ``_add_distributed_args`` (``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--decoder-first-pipeline-num-layers``, ``--decoder-last-pipeline-num-layers``,
  ``--num-layers-per-virtual-pipeline-stage``, ``--num-virtual-stages-per-pipeline-rank``,
  ``--overlap-grad-reduce``, ``--ddp-bucket-size`` (int), ``--overlap-param-gather``,
  ``--use-distributed-optimizer``, ``--use-torch-fsdp2``, ``--context-parallel-size``),
  ``_add_training_args`` (``--micro-batch-size``, ``--global-batch-size``, ``--recompute-granularity``
  {full, selective}, ``--recompute-method`` {uniform, block}, ``--recompute-num-layers``,
  ``--tp-comm-overlap``), ``_add_network_size_args``/``_add_mixed_precision_args``
  (``--sequence-parallel``, ``--bf16``, ``--fp16``), ``_add_moe_args``
  (``--expert-model-parallel-size``, ``--expert-tensor-parallel-size``),
  ``_add_transformer_engine_args`` (``--fp8-format`` {e4m3, hybrid}).
* DeepSpeed ``docs/_pages/config-json.md`` ("DeepSpeed Configuration JSON") and
  ``deepspeed/runtime/zero/config.py``: ``train_batch_size``, ``train_micro_batch_size_per_gpu``,
  ``gradient_accumulation_steps``, ``bf16.enabled``, ``fp16.enabled``, ``zero_optimization``
  {``stage``, ``overlap_comm``, ``contiguous_gradients``, ``reduce_scatter``, ``reduce_bucket_size``,
  ``allgather_bucket_size``, ``stage3_prefetch_bucket_size``}; and the identity
  ``train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel GPUs``.
"""

import argparse
from dataclasses import replace

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.workload import Workload
from costmodel.spec.errors import SpecError
from planner.emit import deepspeed_config, megatron_args
from planner.emit.deepspeed import deepspeed_notes
from planner.emit.megatron import bucket_elements, megatron_notes

# name -> argparse spec of the documented argument
MEGATRON = {
    "--tensor-model-parallel-size": dict(type=int),
    "--pipeline-model-parallel-size": dict(type=int),
    "--context-parallel-size": dict(type=int),
    "--expert-model-parallel-size": dict(type=int),
    "--expert-tensor-parallel-size": dict(type=int),
    "--micro-batch-size": dict(type=int),
    "--global-batch-size": dict(type=int),
    "--num-layers-per-virtual-pipeline-stage": dict(type=int),
    "--num-virtual-stages-per-pipeline-rank": dict(type=int),
    "--decoder-first-pipeline-num-layers": dict(type=int),
    "--decoder-last-pipeline-num-layers": dict(type=int),
    "--sequence-parallel": dict(action="store_true"),
    "--tp-comm-overlap": dict(action="store_true"),
    "--tp-comm-overlap-cfg": dict(type=str),
    "--recompute-granularity": dict(choices=["full", "selective"]),
    "--recompute-method": dict(choices=["uniform", "block"]),
    "--recompute-num-layers": dict(type=int),
    "--use-distributed-optimizer": dict(action="store_true"),
    "--use-torch-fsdp2": dict(action="store_true"),
    "--overlap-grad-reduce": dict(action="store_true"),
    "--overlap-param-gather": dict(action="store_true"),
    "--ddp-bucket-size": dict(type=int),
    "--bf16": dict(action="store_true"),
    "--fp16": dict(action="store_true"),
    "--fp8-format": dict(choices=["e4m3", "hybrid"]),
    # Megatron FSDP (arguments.py: --data-parallel-sharding-strategy choices; Megatron-FSDP requires
    # --ckpt-format fsdp_dtensor) and the uneven-split flags (issue 9)
    "--use-megatron-fsdp": dict(action="store_true"),
    "--data-parallel-sharding-strategy": dict(choices=["no_shard", "optim", "optim_grads", "optim_grads_params"]),
    "--ckpt-format": dict(type=str),
    "--pipeline-model-parallel-layout": dict(type=str),
    "--account-for-embedding-in-pipeline-split": dict(action="store_true"),
    "--account-for-loss-in-pipeline-split": dict(action="store_true"),
    # MoE (megatron/core/transformer/transformer_config.py at d98e8a64, whose fields arguments.py turns
    # into flags: moe_grouped_gemm bool, moe_token_dispatcher_type Literal, moe_flex_dispatcher_backend Literal)
    "--moe-grouped-gemm": dict(action="store_true"),
    "--moe-token-dispatcher-type": dict(choices=["allgather", "alltoall", "flex"]),
    "--moe-flex-dispatcher-backend": dict(choices=["deepep", "hybridep", "ncclep"]),
    "--moe-router-dtype": dict(choices=["fp32", "fp64"]),  # transformer_config.py@d98e8a6 moe_router_dtype
    # model_parallel_config.py / transformer_config.py at d98e8a6: overlap_moe_expert_parallel_comm, delay_wgrad_compute
    "--overlap-moe-expert-parallel-comm": dict(action="store_true"),
    "--delay-wgrad-compute": dict(action="store_true"),
    # gradient dtype (arguments.py, mixed precision group)
    "--accumulate-allreduce-grads-in-fp32": dict(action="store_true"),
    "--grad-reduce-in-bf16": dict(action="store_true"),
}
DEEPSPEED_TOP = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "zero_optimization",
    "bf16",
    "fp16",
    "communication_data_type",
}
DEEPSPEED_ZERO = {
    "stage",
    "overlap_comm",
    "contiguous_gradients",
    "reduce_scatter",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
}

PLANS = [
    ParallelConfig(tp=8, pp=2, dp=64, mb=4, vp=8, sp=True, chunks=8, zero=1, bucket_bytes=10e6),
    ParallelConfig(
        tp=4, pp=4, dp=8, mb=2, vp=2, sp=True, zero=1, recompute="selective", layers_per_stage=(22, 26, 26, 22)
    ),
    ParallelConfig(tp=2, pp=16, dp=64, ep=8, mb=1, sp=True, zero=1, chunks=2, recompute="full"),
    ParallelConfig(tp=8, pp=2, dp=4, cp=2, mb=1, recompute="full", recompute_layers=4, zero=3),
    ParallelConfig(tp=1, pp=1, dp=8, mb=8, zero=0, bucket_bytes=0),
]


def megatron_parser():
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name, spec in MEGATRON.items():
        p.add_argument(name, **spec)
    return p


def tokens(c, **kw):
    return [t for arg in megatron_args(c, **kw) for t in arg]


# --------------------------------------------------------------------------- Megatron
@pytest.mark.parametrize("c", PLANS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8"])
def test_megatron_arguments_are_documented_and_parse(c, dtype):
    argv = tokens(c, global_batch=512, layers=96, dtype=dtype)
    assert {t for t in argv if t.startswith("--")} <= set(MEGATRON)
    args = megatron_parser().parse_args(argv)  # types and choices as Megatron declares them
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (c.tp, c.pp)
    assert args.context_parallel_size == c.cp and args.micro_batch_size == c.mb
    assert args.global_batch_size == 512


def test_uniform_interleaving_gives_layers_per_virtual_stage():
    args = megatron_parser().parse_args(tokens(PLANS[0], global_batch=1536, layers=96))
    assert args.num_layers_per_virtual_pipeline_stage == 96 // (2 * 8)  # 6
    assert args.decoder_first_pipeline_num_layers is None


def test_uneven_stages_give_first_and_last_stage_layers():
    args = megatron_parser().parse_args(tokens(PLANS[1], global_batch=64, layers=96))
    assert (args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers) == (22, 22)
    assert args.num_virtual_stages_per_pipeline_rank == 2


def test_recompute_flags():
    full_all = megatron_parser().parse_args(tokens(PLANS[2], global_batch=8192, layers=61))
    assert (full_all.recompute_granularity, full_all.recompute_method, full_all.recompute_num_layers) == (
        "full",
        "uniform",
        1,
    )
    block = megatron_parser().parse_args(tokens(PLANS[3], global_batch=64, layers=96))
    assert (block.recompute_method, block.recompute_num_layers) == ("block", 4)


def test_overlap_and_bucket_in_parameters():
    args = megatron_parser().parse_args(tokens(PLANS[0], global_batch=1536, layers=96))
    assert args.use_distributed_optimizer and args.overlap_grad_reduce and args.overlap_param_gather
    assert args.ddp_bucket_size == 10e6 // 4  # 10 MB of FP32 gradients = 2.5 M parameters
    assert args.sequence_parallel and args.tp_comm_overlap
    none = megatron_parser().parse_args(tokens(PLANS[4], global_batch=64, layers=24))
    assert not none.overlap_grad_reduce and none.ddp_bucket_size is None


def test_expert_parallel_flags():
    args = megatron_parser().parse_args(tokens(PLANS[2], global_batch=8192, layers=61))
    assert (args.expert_model_parallel_size, args.expert_tensor_parallel_size) == (8, 1)


def test_moe_layer_flags_are_what_the_model_charges():
    # the model charges one grouped GEMM and the plan's dispatcher; Megatron-Core's defaults are a
    # loop of expert GEMMs and the AllGather dispatcher, so both are stated for every MoE plan
    ep = megatron_parser().parse_args(tokens(PLANS[2], global_batch=8192, layers=61))
    assert ep.moe_grouped_gemm and ep.moe_token_dispatcher_type == "alltoall" and ep.moe_flex_dispatcher_backend is None
    deepep = ParallelConfig(tp=2, pp=16, dp=64, ep=8, mb=1, sp=True, zero=1, ep_dispatcher="deepep")
    d = megatron_parser().parse_args(tokens(deepep, global_batch=8192, layers=61))
    assert (d.moe_token_dispatcher_type, d.moe_flex_dispatcher_backend) == ("flex", "deepep")
    hy = replace(deepep, ep_dispatcher="hybridep")
    h = megatron_parser().parse_args(tokens(hy, global_batch=8192, layers=61))
    assert (h.moe_flex_dispatcher_backend, h.moe_router_dtype) == ("hybridep", "fp32")
    dense = megatron_parser().parse_args(tokens(PLANS[0], global_batch=1536, layers=96))
    assert not dense.moe_grouped_gemm and dense.moe_token_dispatcher_type is None
    no_ep = megatron_parser().parse_args(tokens(ParallelConfig(tp=2, dp=4), global_batch=64, layers=32, moe=True))
    assert no_ep.moe_grouped_gemm and no_ep.moe_token_dispatcher_type == "alltoall"


def test_notes_say_what_flags_cannot():
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in megatron_notes(PLANS[0]))  # TP comm overlap
    assert any("Megatron FSDP" in n and "CUDA_DEVICE_MAX_CONNECTIONS" in n for n in megatron_notes(PLANS[3]))


DS_PLANS = [  # plans DeepSpeed can run: no vp, no chunks, ZeRO <= 1 with pp > 1
    ParallelConfig(tp=8, pp=2, dp=64, mb=4, sp=True, zero=1, bucket_bytes=10e6, framework="deepspeed"),
    ParallelConfig(tp=4, pp=1, dp=32, mb=2, zero=2, recompute="selective", framework="deepspeed"),
    ParallelConfig(tp=8, pp=1, dp=8, cp=1, mb=1, recompute="full", zero=3, bucket_bytes=40e6, framework="deepspeed"),
    ParallelConfig(tp=1, pp=1, dp=8, mb=8, zero=0, bucket_bytes=0, framework="deepspeed"),
]


# --------------------------------------------------------------------------- DeepSpeed
@pytest.mark.parametrize("c", DS_PLANS)
def test_deepspeed_keys_are_documented_and_batch_identity_holds(c):
    d = deepspeed_config(c, global_batch=512)
    assert set(d) <= DEEPSPEED_TOP and set(d["zero_optimization"]) <= DEEPSPEED_ZERO
    assert d["train_batch_size"] == d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"] * c.dp
    assert d["zero_optimization"]["stage"] == c.zero
    assert d["bf16"]["enabled"] and not d["fp16"]["enabled"]


def test_deepspeed_buckets_in_elements_and_overlap():
    d = deepspeed_config(DS_PLANS[2], global_batch=64)
    z = d["zero_optimization"]
    assert z["overlap_comm"] and z["reduce_bucket_size"] == bucket_elements(DS_PLANS[2]) == 10_000_000
    assert z["stage3_prefetch_bucket_size"] == z["allgather_bucket_size"]
    off = deepspeed_config(DS_PLANS[3], global_batch=64)["zero_optimization"]
    assert not off["overlap_comm"] and "reduce_bucket_size" not in off


def test_deepspeed_fp16_and_notes():
    d = deepspeed_config(DS_PLANS[3], global_batch=64, dtype="fp16")
    assert d["fp16"]["enabled"] and not d["bf16"]["enabled"]
    assert any("tp=8" in n for n in deepspeed_notes(DS_PLANS[0]))


def test_gradient_dtype_flags_and_bucket_elements():
    """FP32 gradients: BF16 runs need no flag (Megatron forces FP32 accumulation), FP16 runs the
    accumulate flag; BF16 gradients ``--grad-reduce-in-bf16``; the bucket holds elements of the
    gradient dtype; a dtype the run cannot have is refused with the rule."""
    c = ParallelConfig(tp=2, dp=4, bucket_bytes=40e6)
    half = ParallelConfig(tp=2, dp=4, bucket_bytes=40e6, grad_dtype="bf16")
    assert "--grad-reduce-in-bf16" not in tokens(c, global_batch=64, layers=24)
    assert "--accumulate-allreduce-grads-in-fp32" in tokens(c, global_batch=64, layers=24, dtype="fp16")
    assert "--grad-reduce-in-bf16" in tokens(half, global_batch=64, layers=24)
    assert bucket_elements(half) == 2 * bucket_elements(c) == 20_000_000
    with pytest.raises(SpecError, match="fp32 or bf16 for a bf16 run"):
        megatron_args(ParallelConfig(tp=2, dp=4, grad_dtype="fp16"), 64, 24)


# --------------------------------------------------------------------------- TE userbuffers: what --tp-comm-overlap runs
def test_tp_comm_overlap_states_the_reduce_scatter_pieces_and_refuses_what_userbuffers_cannot_run(tmp_path):
    import yaml

    from planner.emit import emit_text
    from planner.emit.megatron import tp_overlap_cfg

    w = Workload(global_batch=512, seq_len=4096)
    tp8 = ParallelConfig(tp=8, dp=8, sp=True, chunks=8, zero=1)
    args = megatron_parser().parse_args(tokens(tp8, global_batch=512, layers=32))
    assert args.tp_comm_overlap and args.tp_comm_overlap_cfg == "tp_comm_overlap.yaml"
    cfg = yaml.safe_load(tp_overlap_cfg(8))  # Megatron's _initialize_tp_communicators reads it so
    assert cfg == {
        "proj_fprop": {"method": "pipeline", "num_splits": 8},
        "fc2_fprop": {"method": "pipeline", "num_splits": 8},
    }
    text, notes = emit_text("megatron", tp8, w, 32)
    assert any(tp_overlap_cfg(8) in n for n in notes)
    tp4 = megatron_parser().parse_args(
        tokens(ParallelConfig(tp=4, dp=16, sp=True, chunks=4), global_batch=512, layers=32)
    )
    assert tp4.tp_comm_overlap and tp4.tp_comm_overlap_cfg is None  # TE's default pieces are 4
    for bad, why in (
        (ParallelConfig(tp=8, dp=8, sp=True, chunks=4), "1 or tp=8"),
        (ParallelConfig(tp=8, dp=8, sp=False, chunks=8), "without sequence parallelism"),
        (ParallelConfig(tp=1, dp=8, ep=8, chunks=4), "with tp=1"),
    ):
        with pytest.raises(SpecError, match=why):
            emit_text("megatron", bad, w, 32)


def test_deepspeed_default_bucket_is_five_hundred_million_elements_in_either_gradient_dtype():
    # DeepSpeed's reduce_bucket_size counts elements of the communication dtype (stage_1_and_2.py
    # at edaa72212: the bucket buffer is allocated in communication_data_type); the framework
    # defaults state it in bytes of the plan's gradient dtype, and --emit writes it back as 5e8
    from costmodel.frameworks.defaults import framework_defaults
    from costmodel.spec.units import MB

    for grad in ("fp32", "bf16"):
        mb = framework_defaults("deepspeed", dp=8, pp=1, global_batch=64, zero=3, grad_dtype=grad)["bucket_mb"]
        c = ParallelConfig(dp=8, zero=3, framework="deepspeed", grad_dtype=grad, bucket_bytes=mb * MB)
        assert deepspeed_config(c, 64)["zero_optimization"]["reduce_bucket_size"] == 500_000_000


def test_rack_scale_moe_plan_parses_in_megatron_and_back_to_the_plan(capsys):
    """Issue 39: DeepSeek-V3 on 1,152 GB200 as recommend answers it (TP2 PP3 VP4 EP32, HybridEP, the EP overlap):
    Megatron's parser takes the emitted arguments and the planner's own parser reads the same plan back."""
    import shlex

    from planner import cli
    from planner.megatron_args import config_fields, parse_command_line

    plan = "--tp 2 --pp 3 --vp 4 --ep 32 --mb 1 --sp --zero 1 --ep-dispatcher hybridep --ep-overlap".split()
    base = "evaluate --model deepseek-v3 --cluster gb200-nvl72 --gpus 1152 --global-batch 9216 --seq 4096".split()
    assert cli.main([*base, *plan, "--emit", "megatron"]) == 0
    line = capsys.readouterr().out.replace("\\\n", " ")  # the printed line, its continuations joined
    argv = shlex.split(line)
    ours = [
        t for i, t in enumerate(argv) if t in MEGATRON or (i and argv[i - 1] in MEGATRON and not t.startswith("--"))
    ]
    args = megatron_parser().parse_args(ours)
    assert args.overlap_moe_expert_parallel_comm and args.delay_wgrad_compute
    assert (args.expert_model_parallel_size, args.moe_flex_dispatcher_backend) == (32, "hybridep")
    back = config_fields(parse_command_line(line), layers=61)
    want = dict(tp=2, pp=3, ep=32, mb=1, zero=1, ep_dispatcher="hybridep", ep_overlap=True)
    assert {k: back.get(k) for k in want} == want
