"""issue 14: the unsharded model at micro-batch 1 is built once per process, for the whole-model
parameter counts of sharded workloads and for a workload of those settings alike."""

from __future__ import annotations

from perfmodel._memo import BoundedMemo
from perfmodel.workload import build_model, zoo

GPT = {"hidden": 256, "layers": 4, "heads": 4, "seq_len": 128, "vocab": 1000}


def test_whole_build_is_shared_and_equal_to_a_fresh_one(monkeypatch) -> None:
    monkeypatch.setattr(zoo, "_WHOLE_BUILDS", BoundedMemo(16))
    monkeypatch.setattr(zoo, "_WHOLE_COUNTS", BoundedMemo(256))
    built: list[int] = []
    real = zoo.Net

    def counting(*a, **k):
        built.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(zoo, "Net", counting)
    sharded = build_model("gpt", batch_size=2, precision="bf16", tp=2, **GPT)
    assert built == [2, 1]  # the rank's network, then the whole model for its counts
    whole = build_model("gpt", batch_size=1, precision="bf16", **GPT)
    assert built == [2, 1]  # the whole model's build, reused
    assert whole.total_params == sharded.total_params
    # hand count: 4 layers x (12 h^2 + 13 h) + token embedding 1000 h + positions 128 h
    # + final norm 2 h (h = 256; the output head is tied to the token embedding)
    h = 256
    assert whole.total_params == 4 * (12 * h * h + 13 * h) + 1000 * h + 128 * h + 2 * h
    monkeypatch.setattr(zoo, "_WHOLE_BUILDS", BoundedMemo(16))
    fresh = build_model("gpt", batch_size=1, precision="bf16", **GPT)
    assert fresh == whole and fresh.layers is not whole.layers
    assert build_model("gpt", batch_size=2, precision="bf16", **GPT).layers != whole.layers
