"""``ParallelConfig.fused_norm`` (issue 42): torchtitan's 2024 presets ran a fused Triton RMSNorm beside eager RoPE and
SwiGLU; eager RoPE saves no FP32 Q/K (PyTorch's ``MulBackward0`` keeps ``self`` only for ``other``'s gradient);
KempnerForge trains a BF16 model (BF16 Adam moments). Each changes what the sources' rows charge."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import published  # noqa: E402
from costmodel.physics.kernels.compute import layer_ops  # noqa: E402
from costmodel.physics.kernels.eager import eager_extra_bytes_per_token  # noqa: E402
from costmodel.spec.errors import SpecError  # noqa: E402
from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.spec.presets import load_cluster, load_model  # noqa: E402
from costmodel.spec.workload import Workload  # noqa: E402

LLAMA2 = load_model("llama2-13b")
EAGER = dict(framework="fsdp2", zero=3, dp=64, fused_elementwise=False)


def test_unset_follows_the_other_element_wise_ops():
    assert ParallelConfig().norms_fused and not ParallelConfig(**EAGER).norms_fused
    assert ParallelConfig(**EAGER, fused_norm=True).norms_fused
    assert "fused_norm" not in ParallelConfig(**EAGER).to_dict()
    c = ParallelConfig(**EAGER, fused_norm=True)
    assert ParallelConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("kw", [dict(fused_norm=False), dict(EAGER, fused_norm=1), dict(EAGER, fused_norm="yes")])
def test_refused_in_one_line(kw):
    with pytest.raises(SpecError) as e:
        ParallelConfig(**kw)
    assert "fused_norm" in str(e.value) and "\n" not in str(e.value)


def test_eager_extras_are_the_norms_and_swiglu_only():
    h, f = LLAMA2.hidden, LLAMA2.ffn_hidden
    assert eager_extra_bytes_per_token(LLAMA2, ParallelConfig(**EAGER)) == 8 * h + 2 * f
    assert eager_extra_bytes_per_token(LLAMA2, ParallelConfig(**EAGER, fused_norm=True)) == 2 * f


def test_a_fused_norm_is_timed_as_one_kernel():
    dev, w = load_cluster("a100-80g").device, Workload(global_batch=128, seq_len=4096)

    def norm_s(c):
        return sum(o.fwd_s for o in layer_ops(LLAMA2, dev, w, c) if o.name in ("ln1", "ln2"))

    eager, fused = norm_s(ParallelConfig(**EAGER, mb=2)), norm_s(ParallelConfig(**EAGER, mb=2, fused_norm=True))
    assert fused == norm_s(ParallelConfig(framework="fsdp2", zero=3, dp=64, mb=2)) and eager > 3 * fused


def _row(name, row_id):
    return next(r for r in published.load_set(name) if r.row_id == row_id)


def test_the_sources_rules():
    # torchtitan @041336434: llama2_13b.toml norm_type fused_rmsnorm, llama2_70b.toml rmsnorm
    assert _row("sealed", "220").fixed.get("fused_norm") is True
    assert "fused_norm" not in _row("sealed", "224").fixed
    # KempnerForge casts its model to BF16: every row of its reports
    rows = [r for r in published.load_set("all") + published.load_set("sealed") if r.source.startswith("kempner")]
    assert rows and all(r.fixed.get("optimizer_dtype") == "bf16" for r in rows)
