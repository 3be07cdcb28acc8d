"""Framework mechanics with a cost of their own: gradient buckets, ZeRO-3/FSDP parameter fetches and the
embedding/head units' collectives, FSDP2's copies, optimizer and activation CPU offload. May import:
``costmodel.physics.kernels``, ``comm``, ``memory`` and below.
"""
