"""Issue 42 item 2: Megatron-Core's ``--recompute-modules moe_act`` (NVIDIA's Qwen3 recipe) is accepted and charged
as Megatron-Core runs it (``moe/experts.py`` at d98e8a64: the routed experts' activation output is discarded after
the expert fc2's forward and recomputed in backward, without the dispatch and combine all-to-alls)."""

import json

from planner import cli

QWEN = ["--model", "qwen3-30b-a3b", "--cluster", "h100-sxm", "--gpus", "64", "--global-batch", "256", "--seq", "4096"]
PLAN = ["--tp", "1", "--pp", "1", "--ep", "8", "--mb", "1", "--recompute", "selective"]


def _evaluate(capsys, *modules):
    assert cli.main(["evaluate", *QWEN, *PLAN, "--recompute-modules", *modules, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_moe_act_is_accepted_and_trades_memory_for_a_little_time(capsys):
    base, act, moe = (_evaluate(capsys, *m) for m in (("core_attn",), ("core_attn", "moe_act"), ("core_attn", "moe")))
    assert act["config"]["recompute_modules"] == ["core_attn", "moe_act"]
    # the fc2 inputs of the routed slots are not kept ...
    assert act["peak_memory_bytes"] < base["peak_memory_bytes"]
    # ... and only the activation function is replayed: far less than the whole MoE block, no all-to-all again
    extra_act = act["breakdown"]["recompute_s"] - base["breakdown"]["recompute_s"]
    extra_moe = moe["breakdown"]["recompute_s"] - base["breakdown"]["recompute_s"]
    assert 0 < extra_act < 0.2 * extra_moe
    assert abs(act["breakdown"]["ep_exposed_s"] - base["breakdown"]["ep_exposed_s"]) < 1e-3


def test_emitted_megatron_line_carries_moe_act(capsys):
    args = ["evaluate", *QWEN, *PLAN, "--recompute-modules", "core_attn", "moe_act", "--emit", "megatron"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "--recompute-modules core_attn moe_act" in out


def test_deepseek_v3_recipe_as_its_report_states_it_fits_on_h800(capsys):
    """Issue 42 item 2: DeepSeek-V3's recipe (TP1 PP16 EP64, ZeRO-1 on 2,048 H800) recomputes every RMSNorm and
    the MLA up-projections, and caches the SwiGLU inputs to recompute its output in backward (arXiv 2412.19437,
    sections 3.2.3 and 3.3.3): Megatron-Core's layernorm, mla_up_proj and moe_act modules. The plan fits the 80 GB
    it ran on (72.1 GiB; 88.7 at 00b7cca-era loads, before the loss-free router's balance was charged, 74.8
    without the SwiGLU recompute), and the SwiGLU recompute saves the fc2 inputs of every routed slot."""
    args = ["evaluate", "--model", "deepseek-v3", "--cluster", "h800", "--gpus", "2048", "--global-batch", "15360"]
    args += ["--seq", "4096", "--tp", "1", "--pp", "16", "--ep", "64", "--zero", "1", "--dtype", "fp8", "--mb", "1"]
    args += ["--recompute", "selective", "--recompute-modules", "layernorm", "mla_up_proj"]
    assert cli.main([*args, "--json"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert cli.main([*args, "moe_act", "--json"]) == 0
    stated = json.loads(capsys.readouterr().out)
    assert stated["fits"] and stated["peak_memory_bytes"] < 76 * 2**30  # room for the memory margin too
    assert stated["peak_memory_bytes"] < without["peak_memory_bytes"] - 2 * 2**30
