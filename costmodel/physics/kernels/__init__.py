"""Kernel time of each op: GEMM and grouped GEMM (tiles, waves, fitted efficiencies), attention, element-wise
work, the layer's and the MoE block's ops, recompute fractions, FLOP accounting, the KV cache's size, dropout and
eager-mode extras, the ops an MTP module adds, and the host (CPU) time to issue a layer's work (``host``). May
import: ``costmodel.spec``, ``costmodel.frameworks``.
"""
