"""What dropout stores and moves: its mask only when its probability is above zero.

PyTorch skips dropout entirely at ``p = 0``: ATen's ``dropout`` takes the fused kernel (which
returns the output and a 1-byte mask) only when ``p > 0 && p < 1`` (``is_fused_kernel_acceptable``),
and ``_dropout_impl`` returns its input unchanged ``if (p == 0 || !train)``
(pytorch/pytorch ``aten/src/ATen/native/Dropout.cpp`` @03d697c5, an old version; later copies of the
file read ``if (p == 0 || !train || input.numel() == 0)``). Under ``torch.compile`` (Megatron-Core's
``jit_fuser``, ``megatron/core/jit.py`` @d98e8a64, on PyTorch >= 2.2) the ``aten.dropout`` decomposition is
``if train and p != 0: return aten.native_dropout(...)[0] else: return input.clone()``
(``torch/_decomp/decompositions.py``, a stored copy read through the search tool, its commit not named):
no mask either. So at ``p = 0`` nothing is saved for
backward and no mask is written; in inference (``train`` false) neither.

Megatron-Core applies the hidden dropout in the bias-dropout-add after attention and after the MLP
(``megatron/core/fusions/fused_bias_dropout.py`` @d98e8a64, ``torch.nn.functional.dropout(x, p=prob,
training=training)`` then ``residual + out``) and to the embedding output
(``language_model_embedding.py``: ``torch.nn.Dropout(self.config.hidden_dropout)``), and the attention
dropout to the softmax output of the unfused attention (``dot_product_attention.py``:
``self.attention_dropout(attention_probs)``); ``TransformerConfig`` defaults both to 0.1.
Transformer Engine (``transformer_engine/pytorch/attention/dot_product_attention/backends.py`` @d0067d0):
``UnfusedDotProductAttention`` applies ``torch.nn.Dropout(attention_dropout)`` to the probabilities (as
above); ``FlashAttention`` and ``FusedAttention`` pass ``dropout_p`` to the kernel, and the fused backward
gets back ``softmax_lse, rng_state`` (the RNG state, no mask) whatever ``p`` is, so the attention dropout
only matters for unfused attention here.

>>> mask_bytes(0.1), mask_bytes(0.0), mask_bytes(0.1, train=False)
(1, 0, 0)
>>> saved_bytes_per_score(0.1), saved_bytes_per_score(0.0)   # softmax out; + mask and dropout out
(5, 2)
"""

from __future__ import annotations

#: bytes per element of the mask ``native_dropout`` returns and autograd saves (a bool tensor)
MASK_BYTES = 1
#: bytes per element of the BF16 activations dropout reads and writes
ACT_BYTES = 2


def active(p: float, train: bool = True) -> bool:
    """Whether dropout runs: a training step with ``p > 0`` (ATen ``_dropout_impl``)."""
    return train and p > 0


def mask_bytes(p: float, train: bool = True) -> int:
    """Bytes per element of the dropout mask saved for backward (and written in forward)."""
    return MASK_BYTES if active(p, train) else 0


def saved_bytes_per_score(p_attn: float, train: bool = True) -> int:
    """Bytes per attention score unfused attention saves for backward: the softmax output (2 B, also
    the input the PV GEMM saves at ``p = 0``), and with dropout its mask (1 B) and output (2 B, the PV
    GEMM's input); Korthikanti et al. 2023, section 4.1, ``5 a s^2 b`` of the ``34 s b h + 5 a s^2 b``."""
    return ACT_BYTES + ((MASK_BYTES + ACT_BYTES) if active(p_attn, train) else 0)


def score_kernel_bytes(p_attn: float, train: bool = True) -> tuple[int, int]:
    """(bytes moved per score, kernels) of the unfused attention's element-wise work: the fused
    scale-mask-softmax reads 2 B and writes 2 B; dropout, when it runs, reads 2 and writes 2 + the mask."""
    softmax = 2 * ACT_BYTES
    if not active(p_attn, train):
        return softmax, 1
    return softmax + 2 * ACT_BYTES + MASK_BYTES, 2
