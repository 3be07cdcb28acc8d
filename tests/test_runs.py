"""Reading measured runs: CSV/YAML tables and Megatron-LM / NeMo training logs (planner.runs)."""

from pathlib import Path

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.presets import load_model
from planner import megatron_args as mg
from planner.run_logs import median_after_warmup, parse_log
from planner.runs import cluster_for, read_runs, run_from_log

DATA = Path(__file__).parent / "data"
MEGATRON_LOG = DATA / "megatron_gpt3_175b.log"

NEMO_LOG = """\
[NeMo I 2024-07-20 09:14:02 megatron_gpt_pretraining:37]
    
    ************** Experiment configuration ***********
[NeMo I 2024-07-20 09:14:02 megatron_gpt_pretraining:38]
    name: megatron_gpt
    trainer:
      devices: 8
      num_nodes: 8
      precision: bf16-mixed
      max_steps: 50
      log_every_n_steps: 1
    model:
      micro_batch_size: 1
      global_batch_size: 128
      tensor_model_parallel_size: 4
      pipeline_model_parallel_size: 4
      virtual_pipeline_model_parallel_size: 5
      context_parallel_size: 1
      encoder_seq_length: 4096
      num_layers: 80
      hidden_size: 8192
      ffn_hidden_size: 28672
      num_attention_heads: 64
      num_query_groups: 8
      sequence_parallel: true
      activations_checkpoint_granularity: null
      fp8: true
      ub_tp_comm_overlap: true
      optim:
        name: distributed_fused_adam
        overlap_grad_sync: true
    
Epoch 0: :   2%|▏         | 1/50 [00:19<15:31, reduced_train_loss=11.10, global_step=0.000, consumed_samples=128.0, train_step_timing in s=19.00]
Epoch 0: :   4%|▍         | 2/50 [00:25<10:01, reduced_train_loss=11.00, global_step=1.000, consumed_samples=256.0, train_step_timing in s=5.210]
Epoch 0: :   6%|▌         | 3/50 [00:30<07:58, reduced_train_loss=10.90, global_step=2.000, consumed_samples=384.0, train_step_timing in s=4.760]
Epoch 0: :   8%|▊         | 4/50 [00:35<06:46, reduced_train_loss=10.80, global_step=3.000, consumed_samples=512.0, train_step_timing in s=4.741]
Epoch 0: :  10%|█         | 5/50 [00:40<06:03, reduced_train_loss=10.70, global_step=4.000, consumed_samples=640.0, train_step_timing in s=4.745]
"""

CSV = """\
label,model,cluster,gpus,global_batch,seq,dtype,tp,pp,vp,mb,sp,zero,recompute,step_time_s,notes
a,gpt3-175b,a100-80g,64,64,2048,bf16,8,8,3,1,on,0,selective,13.75,Korthikanti Table 5
b,llama3-8b,a100-80g,16,32,4096,bf16,2,1,,1,yes,1,none,,no step time: uses tokens
"""


def write(tmp_path, name, text) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --------------------------------------------------------------------------- tables
def test_csv_runs(tmp_path):
    text = CSV.replace(",,no step time: uses tokens", ",2.5,").replace("step_time_s,notes", "step_time_s,notes")
    runs = read_runs([write(tmp_path, "runs.csv", text)])
    a, b = runs
    assert a.label == "a" and a.config.tp == 8 and a.config.pp == 8 and a.config.vp == 3 and a.config.dp == 1
    assert a.config.sp and a.config.recompute == "selective" and a.measured_s == 13.75
    assert a.model == load_model("gpt3-175b") and a.cluster_ref == "a100-80g"
    assert b.config.dp == 8 and b.config.zero == 1 and b.workload.seq_len == 4096
    assert cluster_for(runs).name == "a100-80g"


def test_tokens_per_second_gives_the_step_time(tmp_path):
    text = "model,gpus,global_batch,seq,tp,tokens_per_s\nllama3-8b,8,64,4096,8,100000\n"
    (run,) = read_runs([write(tmp_path, "r.csv", text)])
    assert run.measured_s == pytest.approx(64 * 4096 / 100000)  # tokens per step / tokens per second
    text = "model,gpus,global_batch,seq,tp,tokens_per_s_per_gpu\nllama3-8b,8,64,4096,8,12500\n"
    (run,) = read_runs([write(tmp_path, "r2.csv", text)])
    assert run.measured_s == pytest.approx(64 * 4096 / (12500 * 8))


def test_yaml_runs(tmp_path):
    text = """runs:
  - {model: llama3-8b, gpus: 8, global_batch: 64, seq: 4096, tp: 2, sp: true, step_time_s: 3.1}
  - {model: llama3-8b, gpus: 16, global_batch: 64, seq: 4096, tp: 2, pp: 2, step_time_s: 1.7, label: two}
"""
    runs = read_runs([write(tmp_path, "runs.yaml", text)])
    assert [r.config.dp for r in runs] == [4, 4] and runs[1].label == "two" and runs[0].config.sp


def test_model_from_option_when_the_table_names_none(tmp_path):
    text = "gpus,global_batch,seq,tp,step_time_s\n8,64,4096,8,3.0\n"
    (run,) = read_runs([write(tmp_path, "r.csv", text)], model="llama3-8b")
    assert run.model.name == "llama3-8b"


@pytest.mark.parametrize(
    "text, where, what",
    [
        ("model,gpus,global_batch,seq,tp,step_time_s\nllama3-8b,8,64,4096,8,-1\n", ":2: step_time_s", "positive"),
        (
            "model,gpus,global_batch,seq,tp,step_time\nllama3-8b,8,64,4096,8,1\n",
            ":2: column='step_time'",
            "did you mean step_time_s?",
        ),
        ("model,gpus,global_batch,seq,tp\nllama3-8b,8,64,4096,8\n", ":2: step_time_s", "exactly one of"),
        ("model,gpus,global_batch,seq,tp,step_time_s\nllama3-8b,8,64,4096,3,1\n", ":2: tp*pp*cp", "divisor"),
        ("model,gpus,global_batch,seq,tp,step_time_s\nllama3-8b,8,64,4096,8,1,9\n", ":2", "as many as the header"),
        ("model,gpus,global_batch,seq,tp,step_time_s\nnot-a-model,8,64,4096,8,1\n", ":2: model", "preset"),
        ("model,gpus,global_batch,seq,tp,sp,step_time_s\nllama3-8b,8,64,4096,8,maybe,1\n", ":2: sp", "True or False"),
        ("model,gpus,global_batch,seq,tp,dtype,step_time_s\nllama3-8b,8,64,4096,8,fp4,1\n", ":2: dtype", "one of"),
    ],
)
def test_bad_tables_name_the_line_and_field(tmp_path, text, where, what):
    p = write(tmp_path, "bad.csv", text)
    with pytest.raises(SpecError) as e:
        read_runs([p])
    assert str(e.value).startswith(f"{p}{where}") and what in str(e.value)


def test_runs_on_several_clusters_need_cluster(tmp_path):
    text = CSV.replace(",,no step time: uses tokens", ",2.5,").replace("b,llama3-8b,a100-80g", "b,llama3-8b,h100-sxm")
    runs = read_runs([write(tmp_path, "runs.csv", text)])
    with pytest.raises(SpecError, match="cluster='a100-80g,h100-sxm'"):
        cluster_for(runs)
    assert cluster_for(runs, "h100-sxm").name == "h100-sxm"


# --------------------------------------------------------------------------- logs
def test_megatron_log():
    run = run_from_log(MEGATRON_LOG)
    c = run.config
    assert (c.tp, c.pp, c.dp, c.cp, c.vp, c.mb) == (8, 8, 1, 1, 3, 1)  # vp = 96 / (8 * 4 layers per chunk)
    assert c.sp and c.recompute == "selective" and c.zero == 0 and c.bucket_bytes == 0
    # transformer_impl transformer_engine: TE's fused attention runs whatever use_flash_attn says (issue 24)
    assert c.flash_attention
    assert (run.workload.global_batch, run.workload.seq_len, run.workload.dtype) == (64, 2048, "bf16")
    # iterations 4-10 after dropping 3 warm-up entries: median 13749.9 ms
    assert run.measured_s == pytest.approx(13.7499)
    # the logged shape is GPT-3 175B (vocabulary from the 'padded vocab' line)
    assert run.model.params == load_model("gpt3-175b").params and run.model.vocab == 51200
    # the model is named as the preset of the logged shape (issue 42 item 8: not the log's file name)
    assert run.label == MEGATRON_LOG.name and run.model_ref == run.model.name == "gpt3-175b"


def test_megatron_log_with_model_option():
    run = run_from_log(MEGATRON_LOG, model="gpt3-175b")
    assert run.model.name == "gpt3-175b" and run.model_ref == "gpt3-175b"


def test_nemo_log(tmp_path):
    run = run_from_log(write(tmp_path, "nemo.log", NEMO_LOG), model="llama2-70b")
    c = run.config
    assert (c.tp, c.pp, c.vp, c.dp, c.mb) == (4, 4, 5, 4, 1)  # 64 GPUs (8 nodes x 8)
    assert c.sp and c.zero == 1 and c.chunks == 4 and c.bucket_bytes == pytest.approx(160e6)
    assert run.workload.dtype == "fp8" and run.workload.seq_len == 4096
    assert run.measured_s == pytest.approx((4.745 + 4.760) / 2)  # median of 5.210, 4.760, 4.741, 4.745


def test_log_parsing_pieces():
    log = parse_log(MEGATRON_LOG)
    assert len(log.step_times_s) == 10 and log.args["tensor_model_parallel_size"] == "8"
    assert median_after_warmup([3.0, 1.0]) == 1.0
    assert median_after_warmup([2.0]) == 2.0


def test_log_without_timing_lines(tmp_path):
    p = write(tmp_path, "x.log", "------ arguments ------\n  num_layers ..... 2\n---- end of arguments ----\n")
    with pytest.raises(SpecError, match="elapsed time per iteration"):
        run_from_log(p)


def test_log_with_a_bad_timing_value_names_the_line(tmp_path):
    text = MEGATRON_LOG.read_text().replace("(ms): 13862.0", "(ms): 13,862.0x")
    p = write(tmp_path, "bad.log", text)
    lineno = next(i for i, ln in enumerate(text.splitlines(), 1) if "13,862.0x" in ln)
    with pytest.raises(SpecError) as e:
        run_from_log(p)
    assert str(e.value).startswith(f"{p}:{lineno}: elapsed time per iteration (ms)")


def test_log_missing_shape_asks_for_model(tmp_path):
    text = "\n".join(ln for ln in MEGATRON_LOG.read_text().splitlines() if "hidden_size" not in ln)
    with pytest.raises(
        SpecError,
        match=r"missing=1: must be stated in the log or given: "
        r"hidden_size \(or --model\)",
    ):
        run_from_log(write(tmp_path, "noshape.log", text))


# --------------------------------------------------------------------------- argument mapping
def test_megatron_arguments_mapping():
    args = mg.parse_command_line(
        "torchrun pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 "
        "--num-layers 32 --num-layers-per-virtual-pipeline-stage 4 --recompute-granularity full "
        "--recompute-method block --recompute-num-layers 2 --overlap-grad-reduce --ddp-bucket-size 10000000 "
        "--tp-comm-overlap --fp8-format hybrid --use-distributed-optimizer"
    )
    f = mg.config_fields(args)
    assert f["vp"] == 4 and f["recompute"] == "full" and f["recompute_layers"] == 2
    assert f["bucket_mb"] == pytest.approx(40.0) and f["chunks"] == 4 and f["zero"] == 1
    assert mg.workload_fields(args)["dtype"] == "fp8"


@pytest.mark.parametrize(
    "flags, grad, bucket_mb",
    [
        ("", None, 40.0),  # no dtype flag: no gradient dtype stated
        ("--bf16", "fp32", 40.0),  # BF16 runs accumulate and reduce in FP32 (4-byte bucket elements)
        ("--bf16 --grad-reduce-in-bf16", "bf16", 20.0),
        ("--fp16", "fp16", 20.0),  # the FP16 default: --accumulate-allreduce-grads-in-fp32 off
        ("--fp16 --accumulate-allreduce-grads-in-fp32", "fp32", 40.0),
    ],
)
def test_gradient_dtype_and_bucket_elements_from_megatron_arguments(flags, grad, bucket_mb):
    f = mg.config_fields(mg.parse_command_line(f"--overlap-grad-reduce --ddp-bucket-size 10000000 {flags}"))
    assert f.get("grad_dtype") == grad and f["bucket_mb"] == pytest.approx(bucket_mb)


def test_a_table_of_runs_states_its_gradient_dtype(tmp_path):
    table = write(
        tmp_path,
        "runs.csv",
        "model,gpus,global_batch,seq,tp,zero,grad_dtype,step_time_s\n"
        "llama3-8b,16,64,4096,2,1,BF16,1.5\nllama3-8b,16,64,4096,2,1,,1.6\n",
    )
    half, full = read_runs([table])
    assert (half.config.grad_dtype, full.config.grad_dtype) == ("bf16", "fp32")
    with pytest.raises(SpecError, match="grad_dtype='int8'"):
        read_runs(
            [
                write(
                    tmp_path,
                    "bad.csv",
                    "model,gpus,global_batch,seq,grad_dtype,step_time_s\nllama3-8b,16,64,4096,int8,1.5\n",
                )
            ]
        )


def _dispatcher(line):
    return mg.config_fields(mg.parse_command_line(line)).get("ep_dispatcher")


def test_moe_dispatcher_from_megatron_arguments():
    ep = "--expert-model-parallel-size 8 "
    assert _dispatcher(ep + "--moe-token-dispatcher-type alltoall") == "alltoall"
    assert _dispatcher(ep + "--moe-token-dispatcher-type flex") == "deepep"  # the flex backend's default
    assert _dispatcher(ep + "--moe-token-dispatcher-type flex --moe-enable-deepep") == "deepep"  # deprecated form
    assert _dispatcher(ep + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep") == "hybridep"
    # the all-to-all overlap across micro-batches is priced (costmodel.compose.ep_overlap), not refused
    line = ep + "--moe-token-dispatcher-type alltoall --overlap-moe-expert-parallel-comm"
    assert mg.config_fields(mg.parse_command_line(line))["ep_overlap"] is True
    # a dense model's logged arguments print Megatron's default dispatcher: nothing to refuse without EP
    assert _dispatcher("--tensor-model-parallel-size 2 --moe-token-dispatcher-type allgather") is None


@pytest.mark.parametrize(
    "line, field",
    [
        ("--expert-model-parallel-size 8", "moe_token_dispatcher_type=None"),  # Megatron's default: allgather
        (
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type allgather",
            "moe_token_dispatcher_type='allgather'",
        ),
        (
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ncclep",
            "moe_flex_dispatcher_backend='ncclep'",
        ),
        (
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --moe-enable-deepep",
            "moe_token_dispatcher_type='alltoall'",
        ),
    ],
)
def test_moe_stacks_the_model_does_not_charge_are_refused(line, field):
    with pytest.raises(SpecError, match=f"^{field.replace('(', '[(]')}: must be"):
        _dispatcher(line)


def test_emitted_moe_arguments_parse_back():
    from costmodel.spec.plan import ParallelConfig
    from planner.emit import megatron_args

    for disp in ("alltoall", "deepep", "hybridep"):
        c = ParallelConfig(tp=2, pp=4, dp=8, ep=8, mb=1, sp=True, zero=1, ep_dispatcher=disp)
        line = " ".join(t for a in megatron_args(c, 256, 48, moe=True) for t in a)
        assert _dispatcher(line) == disp
