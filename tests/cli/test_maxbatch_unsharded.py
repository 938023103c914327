"""``model maxbatch`` with a sharding preset and no data-parallel degree says it sized one
unsharded replica (audit15 item 5: llama3_8b under fsdp on an H100 "does not fit even at batch
1" at 172.56 GiB while predict on 64 H100s fits at 53 GiB, with nothing saying why)."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import cli_json

ARGV = ["model", "maxbatch", "gpt2", "--gpu", "A100-SXM4-80GB", "--precision", "bf16"]
ARGV += ["--optimizer", "adam"]


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main([*ARGV, *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "software, how", [("fsdp", "FSDP"), ("torchtitan", "FSDP"), ("megatron-core", "ZeRO-1")]
)
def test_sharding_preset_on_one_replica_says_not_sharded(
    software: str, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    head = _run(capsys, "--software", software).splitlines()[0]
    assert f"not sharded (dp=1: {how} has no data-parallel peers" in head
    assert "give --plan dp=N" in head
    d = json.loads(_run(capsys, "--software", software, "--json"))
    assert d["note"].startswith("not sharded")


@pytest.mark.parametrize(
    "extra",
    [("--software", "pytorch-ddp"), ("--software", "fsdp", "--plan", "dp=8"), ("--zero", "0")],
)
def test_no_note_where_nothing_is_left_unsharded(
    extra: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "not sharded" not in _run(capsys, *extra)
    assert "note" not in json.loads(_run(capsys, *extra, "--json"))


def test_context_parallel_ranks_are_peers_to_shard_over(capsys: pytest.CaptureFixture[str]) -> None:
    """dp=1, cp=2 under FSDP shards the state over the two context-parallel ranks, so no "not
    sharded" note (it said one before fix18's follow-up)."""
    argv = ["model", "maxbatch", "llama3_8b", "--gpu", "H100-SXM5-80GB", "--precision", "bf16"]
    argv += ["--optimizer", "adam", "--software", "fsdp", "--json"]
    one = cli_json(capsys, [*argv, "--plan", "dp=1"])
    two = cli_json(capsys, [*argv, "--plan", "dp=1,cp=2"])
    assert one["note"].startswith("not sharded")
    assert "note" not in two
