"""Communication: collective cost models, closed-form and flow-level on the topology graph.

Public API::

    from perfmodel.comm import CommCostModel, CommResult, FlowNetwork, LinkParams, run_collective

See ``docs/comm.md`` for the formulas, the NCCL tuner approximation and validation.
"""

from typing import TYPE_CHECKING

from perfmodel._lazy import lazy_exports
from perfmodel.comm.analytic import CommResult
from perfmodel.comm.group import GroupInfo
from perfmodel.comm.model import CommCostModel
from perfmodel.comm.params import Algorithm, LinkClassParams, LinkParams, Protocol

if TYPE_CHECKING:
    from perfmodel.comm.flow import FlowNetwork
    from perfmodel.comm.replay import run_collective

__all__ = [
    "Algorithm",
    "CommCostModel",
    "CommResult",
    "FlowNetwork",
    "GroupInfo",
    "LinkClassParams",
    "LinkParams",
    "Protocol",
    "run_collective",
]


# The flow-level simulator needs SimPy: imported on first use, so that the closed-form model and
# LinkParams load where SimPy is absent (e.g. a calibration run on a GPU machine).
__getattr__, __dir__, _ = lazy_exports(
    globals(), {"flow": ("FlowNetwork",), "replay": ("run_collective",)}
)
