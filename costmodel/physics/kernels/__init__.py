"""Kernel time of each op: GEMM and grouped GEMM (tiles, waves, fitted efficiencies), attention, element-wise
work, the layer's and the MoE block's ops, recompute fractions, FLOP accounting, the KV cache's size, dropout and
eager-mode extras, and the ops an MTP module adds. May import: ``costmodel.spec``, ``costmodel.frameworks``.
"""
