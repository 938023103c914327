"""Per-GPU memory of a plan: a sum of named parts.

Model state per parameter follows Rajbhandari et al. (ZeRO, SC20, section 3.1): working weights
(``Precision.param_bytes``), gradients (``Precision.grad_bytes``) and optimizer state (Adam:
first and second moments, 8 bytes; momentum: 4 bytes; SGD: none) plus, with mixed precision, the
FP32 master weights (4 bytes), counted with the optimizer state as ZeRO does (K = 12 for Adam).
ZeRO stage 1 shards the optimizer state over the data-parallel group, stage 2 also gradients,
stage 3 (and FSDP full sharding) also weights.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class PlanMemory:
    """Bytes one GPU holds at its peak, by part (each field but ``capacity_bytes``, the GPU's
    memory, is a part).

    ``total_bytes`` is exactly the sum of the parts (a property test checks it).
    """

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float
    comm_buffers_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return sum(self.parts().values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def parts(self) -> dict[str, float]:
        """The parts by field name (every field but ``capacity_bytes``), in field order."""
        return {name: getattr(self, name) for name in _PART_FIELDS}

    def to_dict(self) -> dict[str, float | bool]:
        d: dict[str, float | bool] = dict(self.parts())
        d["total_bytes"] = self.total_bytes
        d["capacity_bytes"] = self.capacity_bytes
        d["fits"] = self.fits
        return d


#: The fields of :class:`PlanMemory` that are parts of its total, in field order.
_PART_FIELDS = tuple(f.name for f in fields(PlanMemory) if f.name != "capacity_bytes")
