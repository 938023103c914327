"""The prediction pipeline behind :func:`perfmodel.api.predict`, one module per stage.

::

    Scenario (text, numbers)                       perfmodel.scenario
      │ parse_scenario: every text field typed      perfmodel.scenario_parse  (the edge)
      ▼
    Resolved: topology, plan, preset, recipe        pipeline.resolve
      │ auto_microbatch: the largest micro-batch    pipeline.autosize
      │ that fits, each size lowered once
      ▼
    LoweredStep (TaskGraph, memory per stage)       pipeline.lower  -> perfmodel.parallel.lowering
      │ execute: analytic list schedule or SimPy    pipeline.evaluate -> perfmodel.sim
      ▼
    Evaluated: period, breakdown, straggler wait,   pipeline.evaluate
    input pipeline
      │ speedup baseline (1 GPU, or the smallest    pipeline.baseline
      │ count that fits), notes, MFU, explanation
      ▼
    StepReport                                      pipeline.assemble -> perfmodel.report

What the scenario's names load (topologies, calibration profiles, zoo workloads, cost models)
is read through the caches of :mod:`perfmodel.pipeline.inputs`; a whole run's estimates from a
step's report (checkpoint bytes, energy, cost, goodput, Chakra metadata) are in
:mod:`perfmodel.pipeline.training_run`. :mod:`perfmodel.api` is the public face: the report
cache and the short function that calls these stages in order.
"""
