"""`perfmodel model show` says what eager PyTorch's host issue does to the step."""

from __future__ import annotations

import json

from perfmodel.cli import main
from perfmodel.compute.params import HOST_DISPATCH_S


def test_small_batch_is_host_bound(capsys) -> None:
    assert main(["model", "show", "resnet50", "--batch", "2", "--gpu", "H100-SXM5-80GB",
                 "--precision", "bf16", "--json"]) == 0  # fmt: skip
    t = json.loads(capsys.readouterr().out)["totals"]
    assert t["eager_host_issue_s"] == t["kernels"] * HOST_DISPATCH_S["pytorch-eager"]
    assert t["eager_step_s"] > 3 * t["step_s"]  # the GPU would need ~4 ms, the host ~30 ms
    assert main(["model", "show", "resnet50", "--batch", "2", "--gpu", "H100-SXM5-80GB",
                 "--precision", "bf16"]) == 0  # fmt: skip
    assert "host-bound" in capsys.readouterr().out


def test_large_batch_is_gpu_bound(capsys) -> None:
    assert main(["model", "show", "resnet50", "--batch", "256", "--gpu", "V100-SXM2-16GB",
                 "--precision", "fp16", "--json"]) == 0  # fmt: skip
    t = json.loads(capsys.readouterr().out)["totals"]
    assert t["eager_step_s"] == t["step_s"]
