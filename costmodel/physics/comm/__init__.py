"""Communication time: collectives per algorithm and scope, NCCL's measured corrections, expert-parallel
dispatch and combine, DMA/copy-engine assignments and their rules, and the overhead of splitting an op to
overlap it. May import: ``costmodel.physics.kernels`` and below.
"""
