"""NCCL's correction of its own tree model at medium message sizes.

NVIDIA/nccl ``src/graph/tuning.cc``@5067397: "Trees are not perfectly sticking to the model for
medium sizes. Applying a static correction factor is not ideal but works quite well. Powers of
two, 64 B to 256MB." ``ncclTopoGetAlgoTime`` multiplies the tree all-reduce's bandwidth by
``treeCorrectionFactor[protocol][log2i(nBytes >> 6)]`` (and NVLSTree's on Blackwell with x86
hosts), so the corrected model is both what NCCL chooses by and what it expects the time to be.
Used by :mod:`costmodel.physics.comm.collectives`.
"""

from __future__ import annotations

import math

import numpy as np

#: NCCL's correction of its tree bandwidth at medium sizes per protocol, one entry per power of two of the
#: size from 64 B (src/graph/tuning.cc@5067397 ``treeCorrectionFactor``, rows LL, LL128, Simple)
TREE_CORRECTION = {
    "LL": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    "LL128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    "Simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
}
TREE_CORRECTION_SIMPLE = TREE_CORRECTION["Simple"]
#: the table covers ``log2i(nbytes / 64) < 23`` for the tree, ``< 24`` for NVLSTree (tuning.cc)
TREE_CORRECTION_SIZES, NVLS_TREE_CORRECTION_SIZES = 23, 24
_TREE_CORRECTION = {p: np.asarray(row + (1.0,)) for p, row in TREE_CORRECTION.items()}


def tree_correction(nbytes, n_sizes: int = TREE_CORRECTION_SIZES, proto: str = "Simple"):
    """NCCL's factor on its tree bandwidth for a buffer of ``nbytes`` under ``proto`` (``ncclTopoGetAlgoTime``:
    ``logSize = log2i(nBytes >> 6)``, corrected where ``0 <= logSize < n_sizes``); element-wise for
    arrays.

    >>> [tree_correction(s) for s in (32, 64 * 2 ** 12, 2 ** 20, 2 ** 27, 2 ** 30)]
    [1.0, 0.5, 0.5, 0.9, 1.0]
    """
    if isinstance(nbytes, np.ndarray):
        x = np.maximum(np.asarray(nbytes, dtype=float), 1.0) / 64.0
        log_size = np.where(x >= 1.0, np.floor(np.log2(np.maximum(x, 1.0))), -1).astype(int)
        idx = np.where((log_size >= 0) & (log_size < n_sizes), log_size, len(TREE_CORRECTION[proto]))
        return _TREE_CORRECTION[proto][idx]
    if nbytes < 64:
        return 1.0
    log_size = int(math.floor(math.log2(nbytes / 64.0)))
    return TREE_CORRECTION[proto][log_size] if log_size < n_sizes else 1.0
