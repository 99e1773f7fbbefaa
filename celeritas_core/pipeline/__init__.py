"""Pipelined micro-batch training placed at op level (GPipe, 1F1B).

A training step of batch ``B`` is split into ``M`` micro-batches of ``B / M``; each device runs
the forward and backward ops it holds once per micro-batch, gradients are accumulated, and the
optimizer is applied once, so the update equals the large-batch step's (GPipe: Huang et al.,
NeurIPS 2019; 1F1B: Narayanan et al., PipeDream, SOSP 2019). The modules, bottom up:

* :mod:`~celeritas_core.pipeline.roles`: which ops run once per micro-batch (forward, backward)
  and which once per step (variables before, optimizer updates after);
* :mod:`~celeritas_core.pipeline.microbatch`: the graph's costs at ``B / M`` (from the per-op
  regressions when given, else a scaling with a per-op floor);
* :mod:`~celeritas_core.pipeline.unroll`: the graph of one pipelined step (``M`` copies of the
  per-micro-batch ops, an accumulation chain before each update) that the simulator replays;
* :mod:`~celeritas_core.pipeline.schedules`: each device's order for GPipe and 1F1B, and the
  replay (step time, per-device peak with activations in flight);
* :mod:`~celeritas_core.pipeline.plan`: the search over assignments, ``M`` and the schedule.
"""
