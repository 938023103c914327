"""Clusters above MAX_CLUSTER_GPUS are refused at once with a message naming the size."""

from __future__ import annotations

import pytest

from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.topology.cluster import MAX_CLUSTER_GPUS


def test_limit_is_the_issue_target() -> None:
    assert MAX_CLUSTER_GPUS == 16_384  # Llama-3 405B on 16,384 H100 (issue 14)


def test_too_many_nodes_refused_naming_the_gpus() -> None:
    with pytest.raises(ConfigError, match=r"--nodes 2049 of dgx-a100 is 16,392 GPUs") as exc:
        load_system("dgx-a100", nodes=2049)  # 8 GPUs per DGX A100
    assert exc.value.where == "--nodes"


def test_cli_refuses_100000_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "show", "dgx1-v100", "--nodes", "100000"]) == 2
    assert "800,000 GPUs" in capsys.readouterr().err
