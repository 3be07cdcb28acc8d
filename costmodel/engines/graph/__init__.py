"""Overlap as an outcome: op-dependency graphs scheduled on compute and DMA resources.

The source document (``shared/seeds/DIGEST.md``) names three prerequisites for a communication
op to overlap compute: its data dependency is decoupled, a DMA engine is free, and it is issued
asynchronously. This package builds the op graph of each parallel strategy's mechanism and
schedules it, so the overlap rate ``r`` of each strategy is measured on the schedule, and every
exposed communication op is reported with the prerequisite that failed.

Graph schema (``networkx.DiGraph``; edges are data dependencies, ``u -> v`` meaning ``v``
consumes what ``u`` produces). Node attributes:

``kind``
    ``gemm``, ``attention``, ``elementwise`` or ``sink`` (a zero-length marker on the
    compute stream) for compute; ``allreduce``, ``allgather``, ``reducescatter``,
    ``alltoall`` or ``p2p`` for communication.
``duration_s``
    standalone seconds: compute from :func:`costmodel.physics.kernels.compute.layer_ops`, communication from
    :func:`costmodel.physics.comm.collectives.collective_time_s` (the whole link to itself).
``resource``
    ``"compute"`` or the name of the DMA engine class that carries it
    (:meth:`costmodel.spec.specs.DeviceSpec.engines_for`).
``link``
    ``"intra"`` or ``"inter"`` for communication (transfers on one link share it), ``""`` for compute.
``bytes``
    per-GPU buffer of a collective (0 for compute).
``strategy``
    ``tp sp cp ep pp dp zero`` for communication, ``""`` for compute.
``issue``
    ``"async"`` (posted and left to run) or ``"sync"`` (the compute stream waits for it).
``seq``
    program order: compute runs in ``seq`` order on one stream (CUDA-stream semantics).
``phase``
    ``fwd``, ``bwd`` or ``recompute``.

Modules: :mod:`.nodes` (building graphs), :mod:`.builders` (one builder per mechanism),
:mod:`.scheduler` (the event-driven list scheduler, on the node lists of :mod:`.indexed`), :mod:`.pipeline` (1F1B and interleaved
schedules at stage granularity), :mod:`.compose` (layer -> stage -> step, cached),
:mod:`.explain` and :mod:`.trace` (reports).
"""
