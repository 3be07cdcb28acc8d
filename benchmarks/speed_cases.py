"""The search-speed cases: the problems ``search_speed`` and ``search_speed_pairs`` time (one list for both)."""

from __future__ import annotations

#: name, model preset, cluster preset, GPUs, global batch (sequences), sequence length
CASES = [
    ("GPT-3 175B / 1024 A100", "gpt3-175b", "a100-80g", 1024, 1536, 2048),  # Narayanan et al. 2021 Table 1
    ("GPT 1T / 3072 A100", "gpt-1t", "a100-80g", 3072, 3072, 2048),  # Narayanan et al. 2021 Table 1
    ("Llama-3.1-405B / 16384 H100", "llama3.1-405b", "h100-sxm", 16384, 2048, 8192),  # 16M-token batches
    ("DeepSeek-V3 / 2048 H800", "deepseek-v3", "h800", 2048, 15360, 4096),  # DeepSeek-V3 report, 15360 x 4K
    ("Qwen3-30B-A3B / 64 H100", "qwen3-30b-a3b", "h100-sxm", 64, 512, 4096),  # issue 9's fine-grained MoE case
]

#: the standard speed cases (name prefixes of :data:`CASES`): a change's search speed is checked on these three
STANDARD = ("GPT-3 175B", "DeepSeek-V3", "GPT 1T")


def selected(spec: str | None) -> list[tuple]:
    """The cases ``--cases`` names: all (None), :data:`STANDARD` ('standard') or comma-separated substrings."""
    if spec == "standard":
        return [c for c in CASES if c[0].startswith(STANDARD)]
    return [c for c in CASES if not spec or any(s.lower() in c[0].lower() for s in spec.split(","))]
