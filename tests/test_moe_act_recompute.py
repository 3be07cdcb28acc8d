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
