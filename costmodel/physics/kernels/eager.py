"""What eager PyTorch saves for backward beyond the fused kernels, in torchtitan's Llama block.

The activation model (:func:`costmodel.physics.memory.activations.activation_bytes_per_layer`) counts the tensors a fused
block saves: each norm's input, the GEMM inputs, Q/K/V and the attention output, the MLP's fc1 outputs
and fc2 input. Run eagerly (``ParallelConfig.fused_elementwise=False``, torchtitan without
``training.compile``), autograd also keeps what the element-wise ops save, read from torchtitan's model code
(``torchtitan/models/norms.py`` and ``torchtitan/models/llama/model.py`` @9dec370) and each op's backward
(PyTorch ``tools/autograd/derivatives.yaml``: ``pow`` saves ``self``, ``mul`` both operands, ``silu`` its input):

* ``RMSNorm.forward``: ``self._norm(x.float()).type_as(x) * self.weight`` with ``_norm = x * torch.rsqrt(
  x.pow(2).mean(-1, keepdim=True) + eps)``: the FP32 copy of the input (4 B, saved by ``pow`` and ``mul``)
  and the BF16 normalised tensor before the weight (2 B, saved by ``* self.weight``), where a fused norm keeps
  the BF16 input (2 B): 4 B more per element, twice per block;
* ``apply_rotary_emb``: ``torch.view_as_complex(xq.float()...) * freqs_cis`` saves nothing of Q or K: ``mul``'s
  backward needs ``self`` only for the gradient of ``other``, and the generated autograd code saves each operand
  only where the other's gradient is computed (``MulBackward0``: ``if (grad_fn->should_compute_output(1))
  grad_fn->self_ = SavedVariable(self, false)``); ``freqs_cis`` is a buffer, without gradient, so only it is kept.
  The FP32 upcast and ``view_as_complex`` / ``view_as_real`` save nothing either;
* ``FeedForward.forward``: ``self.w2(F.silu(self.w1(x)) * self.w3(x))``: the ``mul`` saves ``silu``'s output
  (2 B per FFN unit) besides ``w1``'s and ``w3``'s outputs and the product.

The norms' term is dropped where they run fused (``ParallelConfig.fused_norm``: torchtitan's Triton
``fused_rmsnorm`` of 2024 saves the BF16 input and the row statistics, ``ctx.save_for_backward(x, weight, rstd)`` in
``torchtitan/models/norms.py`` @0413364, which is the fused set).
Charged for ``framework='fsdp2'`` (torchtitan's model code) without ``fused_elementwise``; under torchtitan's
per-op SAC or full AC these tensors exist only in the layer being re-materialised in backward.
"""

from __future__ import annotations

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.specs import ModelSpec


def eager_extra_bytes_per_token(model: ModelSpec, c: ParallelConfig) -> float:
    """Bytes per token one layer saves eagerly beyond the fused set (module docstring), on one GPU: the norms
    sequence-sharded under SP, the rest split by TP. Zero unless the plan runs torchtitan's block eagerly.

    >>> from costmodel.spec.presets import load_model
    >>> m = load_model("llama3.1-8b")          # h 4096, 32 heads, 8 KV heads of 128, FFN 14336
    >>> c = ParallelConfig(framework="fsdp2", zero=3, dp=8, fused_elementwise=False)
    >>> eager_extra_bytes_per_token(m, c) == 2 * 4 * 4096 + 2 * 14336
    True
    >>> eager_extra_bytes_per_token(m, ParallelConfig(framework="fsdp2", zero=3, dp=8, fused_elementwise=False,
    ...                                              fused_norm=True)) == 2 * 14336
    True
    >>> eager_extra_bytes_per_token(m, ParallelConfig(framework="fsdp2", zero=3, dp=8))
    0.0
    """
    if c.fused_elementwise or c.framework != "fsdp2" or model.is_moe or model.is_mla:
        return 0.0
    t, sp = c.tp, (c.tp if c.sp_on else 1)
    norms = 0.0 if c.norms_fused else 2 * 4 * model.hidden / sp
    swiglu = 2 * model.ffn_hidden / t if model.activation == "swiglu" else 0.0
    return norms + swiglu
