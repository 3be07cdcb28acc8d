"""The cost of one mechanism, on one GPU, for one micro-batch: kernels (GEMM, attention, layer and MoE ops,
FLOPs, KV cache), communication (collectives, NCCL corrections, EP dispatch, DMA/copy engines, split overheads),
memory (what a stage holds and its bytes) and framework mechanics (gradient buckets, ZeRO-3 fetches and edges,
offload, FSDP2 copies), and ``validity`` (the plan checks that need physics).

Floors inside: ``kernels`` at the bottom; ``comm`` and ``memory`` above it (siblings); ``mechanics`` above
those; ``validity`` last. May import: ``costmodel.spec``, ``costmodel.frameworks``.
"""
