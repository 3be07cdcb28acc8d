"""The cost of one mechanism, on one GPU, for one micro-batch: measured tables (GEMM and intra-node NCCL
times read from AIConfigurator's measurements, with their evidence), kernels (GEMM, attention, layer and MoE ops,
FLOPs, KV cache), communication (collectives, NCCL corrections, EP dispatch, DMA/copy engines, split overheads),
memory (what a stage holds and its bytes) and framework mechanics (gradient buckets, ZeRO-3 fetches and edges,
offload, FSDP2 copies), and ``validity`` (the plan checks that need physics).

Floors inside: ``tables`` at the bottom (it imports only ``costmodel.spec``); ``kernels`` above it;
``comm`` and ``memory`` above that (siblings); ``mechanics`` above those; ``validity`` last. May import: ``costmodel.spec``, ``costmodel.frameworks``.
"""
