"""PlanMemory: its parts are its fields but the capacity, summed in field order."""

from perfmodel.parallel.memory import PlanMemory


def test_parts_are_every_field_but_the_capacity() -> None:
    m = PlanMemory(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, capacity_bytes=63.0)
    assert m.parts() == {
        "weights_bytes": 1.0,
        "grads_bytes": 2.0,
        "optimizer_bytes": 4.0,
        "activations_bytes": 8.0,
        "workspace_bytes": 16.0,
        "comm_buffers_bytes": 32.0,
    }
    assert m.total_bytes == 63.0 and m.fits
    assert not PlanMemory(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, capacity_bytes=62.0).fits
    assert list(m.to_dict()) == [*m.parts(), "total_bytes", "capacity_bytes", "fits"]
