"""``perfmodel predict``'s flags either work in the mode given or are refused / warned about
with the reason, before any work (audit15 item 10)."""

from __future__ import annotations

import pytest

from perfmodel.cli import main

GPT2 = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--global-batch", "64",
        "--optimizer", "adamw", "--fidelity", "analytic", "--interval", "off"]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--plot", "{d}/s.png"], "the plot is the speedup curve of a GPU list"),
        (["--gpus", "1,8", "--trace", "{d}/t.json"], "give one GPU count (--gpus 8)"),
        (["--gpus", "1,8", "--gantt", "{d}/g.png"], "writes one prediction's step"),
        (["--gpus", "1,8", "--chakra", "{d}/et"], "writes one prediction's step"),
        (["--memory-format", "nhwc"], "gpt2 has no convolutions"),
    ],
)
def test_an_ignored_flag_is_refused_before_any_work(tmp_path, capsys, extra, said) -> None:
    argv = [*GPT2, *(x.format(d=tmp_path) for x in extra)]
    assert main(argv) == 2
    assert said in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_flags_that_switch_the_run_are_warned_about(capsys) -> None:
    assert main([*GPT2, "--learners-per-gpu", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("WARNING: learners_per_gpu 2 runs Crossbow's synchronous model")
    assert main([*GPT2, "--software", "megatron", "--zero", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("WARNING: zero 3 with the megatron preset")
    assert main([*GPT2, "--software", "megatron-core", "--zero", "1"]) == 0
    assert "WARNING" not in capsys.readouterr().out


def test_the_cost_of_a_curve_is_printed(capsys) -> None:
    argv = [*GPT2, "--gpus", "1,8", "--tokens", "1e9", "--price-per-gpu-hour", "2"]
    assert main(argv) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("cost of"))
    assert line.startswith("cost of 1,000,000,000 tokens: 1 GPU ") and "; 8 GPUs " in line
    assert line.endswith("(at the price per GPU-hour given)")


def test_an_interval_from_other_frameworks_is_marked_unvalidated(capsys) -> None:
    argv = ["predict", "--system", "dgx-h100", "--model", "llama3_8b", "--global-batch", "64",
            "--precision", "bf16", "--optimizer", "adamw", "--fidelity", "analytic"]  # fmt: skip
    assert main([*argv, "--software", "keras-multi-gpu"]) == 0
    out = capsys.readouterr().out
    assert "unvalidated for keras-multi-gpu: none of the" in out
    assert "used the tensorflow stack" in out
    assert main([*argv, "--software", "megatron-core"]) == 0
    assert "unvalidated for" not in capsys.readouterr().out
