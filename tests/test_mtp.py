"""Multi-token prediction (issue 22): DeepSeek-V3's MTP module counted, placed and priced as
Megatron-Core builds it (costmodel.physics.kernels.mtp), stated on the command line and emitted / read back."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from costmodel.physics.kernels import mtp
from costmodel.engines.analytic import layer_timing, stage_timing
from costmodel.physics.kernels.compute import head_ops
from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.physics.kernels.flops import forward_flops_per_token
from costmodel.spec.hf_config import model_from_hf_config
from costmodel.spec.layout import from_split, of as layout_of, parse, validate
from costmodel.physics.memory.stage_memory import memory_per_stage
from costmodel.physics.memory.stage_contents import stage_params
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import megatron_args as mg
from planner import megatron_model as mm
from planner.cli import main
from tests.test_hf_config import DEEPSEEK_V3

DSV3 = load_model("deepseek-v3")
H800 = load_cluster("h800").with_gpus(1024)
W = Workload(global_batch=4096, seq_len=4096)


def _hand_mtp_params(d: dict) -> tuple[int, int]:
    """(one MTP module's own weights, the two vocab x h copies its checkpoint also stores), by hand from
    the HF config: MLA attention, 256 routed + 1 shared SwiGLU expert, router, 2 layer norms; eh_proj
    2h x h, enorm, hnorm, final norm (DeepSeek-V3 report section 2.2; Megatron-Core MultiTokenPredictionLayer)."""
    h, ql, kvl = d["hidden_size"], d["q_lora_rank"], d["kv_lora_rank"]
    nope, rope, v, a = d["qk_nope_head_dim"], d["qk_rope_head_dim"], d["v_head_dim"], d["num_attention_heads"]
    attn = h * ql + ql * a * (nope + rope) + h * (kvl + rope) + kvl * a * (nope + v) + a * v * h
    experts = (d["n_routed_experts"] + d["n_shared_experts"]) * 3 * h * d["moe_intermediate_size"]
    layer = attn + experts + h * d["n_routed_experts"] + 2 * h
    return layer + 2 * h * h + 3 * h, 2 * d["vocab_size"] * h


def test_the_hf_config_states_one_mtp_module_and_the_preset_agrees():
    assert model_from_hf_config(DEEPSEEK_V3).mtp_layers == DEEPSEEK_V3["num_nextn_predict_layers"] == 1
    assert DSV3.mtp_layers == 1
    assert model_from_hf_config({**DEEPSEEK_V3, "num_nextn_predict_layers": 0}).mtp_layers == 0


def test_mtp_module_parameters_match_a_hand_count_and_the_published_14b():
    own, copies = _hand_mtp_params(DEEPSEEK_V3)
    assert mtp.module_params(DSV3) == own
    # the HF checkpoint's MTP module (layer 61) also stores its embedding and head copies: "685B ... includes
    # 671B of the Main Model weights and 14B of the MTP Module weights" (DeepSeek-V3 model card, quoted at
    # https://hf.global-rail.com/deepseek-ai/DeepSeek-V3-0324/discussions/32); MLA's low-rank norms are not counted
    assert own + copies == pytest.approx(14e9, rel=0.05)
    # on one GPU of the stage holding it (pp 8, tp 1): its layer, eh_proj and norms, and the embedding copy
    c = ParallelConfig(pp=8, ep=1, layers_per_stage=(7, 8, 8, 8, 8, 8, 8, 6))
    off = replace(DSV3, mtp_layers=0)
    grown = sum(stage_params(DSV3, c, 7)) - sum(stage_params(off, c, 7))
    assert grown == own + copies // 2
    assert [sum(stage_params(DSV3, c, s)) for s in range(7)] == [sum(stage_params(off, c, s)) for s in range(7)]


def test_mtp_flops_match_megatron_num_floating_point_operations_by_hand():
    d = DEEPSEEK_V3
    h = d["hidden_size"]
    own, _ = _hand_mtp_params(d)
    routed_inactive = (d["n_routed_experts"] - d["num_experts_per_tok"]) * 3 * h * d["moe_intermediate_size"]
    active_layer = own - 2 * h * h - 3 * h - routed_inactive - 2 * h  # the layer's GEMM weights a token uses
    stack_on, head_on = forward_flops_per_token(DSV3, 0)  # seq 0: no attention core
    stack_off, head_off = forward_flops_per_token(replace(DSV3, mtp_layers=0), 0)
    # training.py num_floating_point_operations @d98e8a64: one more MoE layer, 3h + 2h^2 FMAs, one more logit pass
    assert stack_on - stack_off == pytest.approx(2 * active_layer + 2 * (3 * h + 2 * h * h), rel=1e-12)
    assert head_on == 2 * head_off == 2 * 2 * h * d["vocab_size"]


@pytest.mark.parametrize("pp,vp", [(8, 4), (16, 2), (1, 1)])
def test_the_default_layout_puts_mtp_with_the_loss_and_round_trips(pp, vp):
    split = {8: (7, 8, 8, 8, 8, 8, 8, 6), 16: (4,) * 15 + (1,), 1: (61,)}[pp]
    lay = layout_of(DSV3, ParallelConfig(pp=pp, vp=vp, layers_per_stage=split, ep=1))
    assert lay.stages[-1].mtp == 1 and sum(s.mtp for s in lay.stages) == 1 and lay.stages[-1].loss
    validate(lay, 61, 1)
    assert parse(str(lay), pp) == lay and lay == from_split(split, vp, 1)
    assert "mL" in str(lay)


def test_bridge_pp16_vp2_layout_places_mtp_on_rank_14_with_its_embedding_copy():
    text = "Et*3|(tt|)*29,m|L"  # Megatron-Bridge's DeepSeek-V3 PP16 x VP2 layout
    lay = parse(text, 16)
    validate(lay, 61, 1)
    assert lay.mtp_chunks(14) == (0, 1) and sum(lay.mtp_chunks(15)) == 0
    c = ParallelConfig(tp=1, pp=16, dp=64, ep=64, mb=1, zero=1, recompute="full", layout=text)
    with_mtp = memory_per_stage(DSV3, W, c)
    off = memory_per_stage(replace(DSV3, mtp_layers=0), W, replace(c, layout="Et*3|(tt|)*29,|L"))
    grew = [a.total_bytes - b.total_bytes for a, b in zip(with_mtp, off)]
    assert grew[14] > 0 and grew[15] > 0 and all(g == 0 for g in grew[:14])  # the layer on 14, the logits on 15
    assert mtp.extra_params(DSV3, c, 14) == 2 * 7168 * 7168 + 3 * 7168 + DSV3.embedding_params
    assert mtp.extra_params(DSV3, c, 15) == 0 and mtp.heads_on(DSV3, c, 15) == 2


@pytest.mark.parametrize("layout,pp", [("Et|(tt|)*30mL", 8), ("Et*3|(tt|)*29,m|L", 16)])
def test_deepseek_v3_flagship_layouts_evaluate_with_mtp_and_the_engines_agree(layout, pp):
    c = ParallelConfig(tp=1, pp=pp, dp=1024 // pp, ep=64, mb=1, zero=1, recompute="full", layout=layout)
    off_layout = layout.replace("m", "")
    on = {e: evaluate(DSV3, H800, W, c, engine=e) for e in ("analytic", "graph")}
    off = {
        e: evaluate(replace(DSV3, mtp_layers=0), H800, W, replace(c, layout=off_layout), engine=e)
        for e in ("analytic", "graph")
    }
    for e in on:
        assert on[e].layout == str(parse(layout, pp)) and on[e].step_time_s >= off[e].step_time_s
        assert on[e].peak_memory_bytes >= off[e].peak_memory_bytes
    assert on["graph"].step_time_s == pytest.approx(on["analytic"].step_time_s, rel=0.03)
    # forward per micro-batch: the rank holding m runs one more MoE layer, eh_proj, the norms and the embedding
    # lookup; the last rank one more LM head and cross-entropy (process_mtp_loss)
    rank = next(r for r in range(pp) if sum(parse(layout, pp).mtp_chunks(r)))
    layer = layer_timing(DSV3, H800, W, c, True).fwd_s
    head = sum(op.fwd_s for op in head_ops(DSV3, H800.device, W, c))
    for r in sorted({rank, pp - 1}):
        grown = (
            stage_timing(DSV3, H800, W, c, r).fwd_s
            - stage_timing(replace(DSV3, mtp_layers=0), H800, W, replace(c, layout=off_layout), r).fwd_s
        )
        want = (layer + mtp.extra_s(DSV3, H800.device, W, c, r)[0] if r == rank else 0.0) + (head if r == pp - 1 else 0)
        assert grown == pytest.approx(want, rel=1e-9) and grown > 0


def _cli_json(capsys, *extra):
    argv = [
        "evaluate",
        "--model",
        "deepseek-v3",
        "--cluster",
        "h800",
        "--gpus",
        "1024",
        "--global-batch",
        "4096",
        "--seq",
        "4096",
        "--tp",
        "1",
        "--ep",
        "64",
        "--mb",
        "1",
        "--zero",
        "1",
        "--recompute",
        "full",
        *extra,
    ]
    assert main(argv + ["--json", "--emit", "megatron"]) == 0
    return json.loads(capsys.readouterr().out)


def test_mtp_layers_flag_turns_mtp_off_and_the_emitted_line_reads_back(capsys):
    on = _cli_json(capsys, "--pp", "8", "--vp", "4")
    off = _cli_json(capsys, "--pp", "8", "--vp", "4", "--mtp-layers", "0")
    assert "m" in on["layout"] and "m" not in off["layout"]
    assert on["step_time_s"] > off["step_time_s"]
    words = on["megatron_model_args"] + on["megatron_args"]
    assert words[words.index("--mtp-num-layers") + 1] == "1" and "--mtp-num-layers" not in off["megatron_model_args"]
    a = {**mg.parse_command_line(" ".join(shlex.quote(t) for t in words)), "padded_vocab_size": "129280"}
    assert mm.model_fields(a)["mtp_layers"] == 1 and mm.mtp_layers(a) == 1
    back = mg.config_fields(a, 61)
    got = parse(back["layout"], 8) if "layout" in back else from_split(tuple(back["layers_per_stage"]), back["vp"], 1)
    assert got == parse(on["layout"], 8)
    assert mm.mtp_layers(mg.parse_command_line("--num-layers 61")) == 0  # Megatron: no --mtp-num-layers, no MTP


def test_a_layout_without_the_models_mtp_layer_is_refused_with_the_rule(capsys):
    assert (
        main(
            [
                "evaluate",
                "--model",
                "deepseek-v3",
                "--cluster",
                "h800",
                "--gpus",
                "1024",
                "--global-batch",
                "4096",
                "--seq",
                "4096",
                "--tp",
                "1",
                "--pp",
                "8",
                "--ep",
                "64",
                "--layout",
                "Et|(tt|)*30L",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "1 MTP layers m" in err and "mtp_num_layers" in err
    assert (
        main(
            [
                "evaluate",
                "--model",
                "deepseek-v3",
                "--cluster",
                "h800",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--seq",
                "4096",
                "--mtp-layers",
                "-1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "mtp_layers" in err


def test_automodel_rows_run_without_mtp_and_bridge_rows_with_it():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
    from benchmarks.published import BRIDGE_2509_RECIPES, load_set

    rows = [r for r in load_set("all") if r.model is not None and r.model.name == "deepseek-v3"]
    auto = [r for r in rows if r.source == "nemo_automodel"]
    assert auto and all(r.model.mtp_layers == 0 for r in auto)
    # the Bridge recipe's layout states the MTP layer: its rows keep the preset's (Megatron validates the count)
    validate(parse(BRIDGE_2509_RECIPES[("DeepSeekV3", "H100")]["layout"], 8), DSV3.layers, DSV3.mtp_layers)
