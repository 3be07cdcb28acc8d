"""What is planned: the model, hardware and workload specs, the parallel plan as data (``ParallelConfig``),
pipeline layouts and stages, the DMA assignment's form, presets, Hugging Face configs, units and typed errors.

Owns data and its local checks, no physics. Offers: ``specs`` (``ModelSpec``, ``ClusterSpec``, ``DeviceSpec``,
``LinkSpec``), ``workload.Workload``, ``plan.ParallelConfig``, ``layout``, ``stages``, ``dma_plan``, ``presets``
(``load_model``, ``load_cluster``), ``hf_config``, ``errors`` (``SpecError``...), ``units``.
May import: nothing else in ``costmodel``.
"""
