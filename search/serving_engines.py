"""What each serving engine (vLLM, SGLang, TensorRT-LLM) can run: its launch settings (:class:`EngineSpec`,
:data:`ENGINES`), one server's parallel settings as the engine spells them (:class:`ServerLayout`), the plan
those settings run (:func:`engine_config`) and the settings that run a plan exactly (:func:`server_layout`).
:mod:`search.infer` keeps to the plans an engine can run; :mod:`planner.emit_serving` writes their flags."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.spec.plan import ParallelConfig


@dataclass(frozen=True)
class EngineSpec:
    """What one serving engine's launch settings can express.

    dp_in_server : one server runs several data-parallel replicas (``--data-parallel-size`` /
        ``--dp-size``); otherwise replicas are separate servers behind a load balancer.
    ep_rule : ``"tp*dp"`` (vLLM: ``--enable-expert-parallel`` makes EP = TP x DP of one server),
        ``"divides_tp"`` (SGLang ``--ep-size``, TRT-LLM ``--ep_size``: MoE TP = TP / EP).
    dp_attention : MoE experts over all ``tp*dp`` GPUs with data-parallel attention
        (SGLang ``--enable-dp-attention``).
    """

    name: str
    title: str
    dp_in_server: bool
    ep_rule: str
    dp_attention: bool = False
    sp: bool = False  # a launch setting turns sequence parallelism on
    chunks: bool = False  # a launch setting chunks TP/EP collectives against the GEMMs


#: each engine's runnable settings (the launch flags are in :mod:`planner.emit_serving`)
ENGINES = {
    "vllm": EngineSpec("vllm", "vLLM", dp_in_server=True, ep_rule="tp*dp"),
    "sglang": EngineSpec("sglang", "SGLang", dp_in_server=True, ep_rule="divides_tp", dp_attention=True),
    "trtllm": EngineSpec("trtllm", "TensorRT-LLM", dp_in_server=False, ep_rule="divides_tp"),
}


@dataclass(frozen=True)
class ServerLayout:
    """One server's parallel settings as the engine spells them, and how many such servers.

    tp_size : the engine's TP size (SGLang with DP attention: all ``tp*dp`` GPUs of the server).
    dp_size : data-parallel ranks inside one server (1: none).
    ep_size : expert-parallel size (vLLM: ``tp_size * dp_size`` when ``expert_parallel``).
    """

    tp_size: int
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    expert_parallel: bool = False
    dp_attention: bool = False
    replicas: int = 1


def engine_config(engine: str, lay: ServerLayout) -> tuple[int, int, int, int]:
    """``(tp, pp, dp, ep)`` the engine runs for ``lay`` (its documented semantics)."""
    if engine == "vllm":
        ep = lay.tp_size * lay.dp_size if lay.expert_parallel else 1
        return lay.tp_size, lay.pp_size, lay.dp_size * lay.replicas, ep
    if engine == "sglang" and lay.dp_attention:
        return lay.tp_size // lay.dp_size, lay.pp_size, lay.dp_size * lay.replicas, lay.ep_size
    return lay.tp_size, lay.pp_size, lay.dp_size * lay.replicas, lay.ep_size


def server_layout(engine: str, c: ParallelConfig, moe: bool) -> ServerLayout | None:
    """The engine settings that run ``c`` exactly, or ``None`` when the engine cannot express it."""
    spec = ENGINES[engine]
    if (c.sp and not spec.sp) or (c.chunks > 1 and not spec.chunks) or (c.ep > 1 and not moe):
        return None
    tp, pp, dp, ep = c.tp, c.pp, c.dp, c.ep
    lay = None
    if spec.ep_rule == "tp*dp":
        if ep > 1 and ep == tp * dp:
            lay = ServerLayout(tp, pp, dp, ep, expert_parallel=True)
        elif ep > 1 and ep == tp:  # EP within one server; replicas are separate servers
            lay = ServerLayout(tp, pp, 1, ep, expert_parallel=True, replicas=dp)
        elif ep == 1:  # MoE without EP: one server's DP would TP-shard experts over tp*dp GPUs
            lay = ServerLayout(tp, pp, dp, 1) if not moe else ServerLayout(tp, pp, 1, 1, replicas=dp)
    else:
        if spec.dp_attention and moe and dp > 1 and pp == 1 and ep == tp * dp:
            lay = ServerLayout(tp * dp, 1, dp, ep, dp_attention=True)
        elif ep == 1 or tp % ep == 0:
            lay = ServerLayout(tp, pp, dp, ep) if spec.dp_in_server else ServerLayout(tp, pp, 1, ep, replicas=dp)
    if lay is None or engine_config(engine, lay) != (tp, pp, dp, ep):
        return None
    return lay
