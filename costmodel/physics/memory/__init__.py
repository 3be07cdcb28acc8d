"""Memory per pipeline stage: which layers and parameters a stage holds (``stage_contents``) and its
weights, gradients, optimizer state, activations and reserved bytes (``stage_memory``). May import:
``costmodel.physics.kernels`` and below.
"""
