"""What each framework runs and issues: Megatron-Core, DeepSpeed and PyTorch FSDP2's rules (which ZeRO
semantics a plan gets, what it refuses), their defaults (bucket sizes, batch rules) and the software stacks
(attention kernel, fused element-wise kernels), with no times.

Offers: ``rules`` (``semantics``, ``check``...), ``defaults`` (``framework_defaults``), ``stacks`` (``load_stack``,
``apply_stack``). May import: ``costmodel.spec``.
"""
