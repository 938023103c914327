"""Executing task graphs: SimPy (:func:`simulate`) and the analytic list schedule (:func:`evaluate`)."""

from perfmodel.sim.engine import FlowComm, Timeline, evaluate, simulate

__all__ = ["FlowComm", "Timeline", "evaluate", "simulate"]
