"""``perfmodel predict`` says what it assumed (audit15 item 6): the defaults it took in its
header, a loud warning for a transformer on the default SGD, which NCCL release each part
follows, what MFU divides by, and an ``--explain`` recipe of only what runs."""

from __future__ import annotations

import re

import pytest

from perfmodel.cli import main
from perfmodel.cli._common import nccl_releases
from perfmodel.comm.tuner import NCCL_2_8, NCCL_2_29, tuner_for
from perfmodel.topology.nccl_p2p import DEFAULT_NCCL_RELEASE

H100_LLAMA = ["predict", "--system", "dgx-h100", "--model", "llama3_8b", "--global-batch", "64",
              "--precision", "bf16", "--fidelity", "analytic"]  # fmt: skip


def test_header_marks_defaults_and_warns_for_a_transformer_on_default_sgd(capsys) -> None:
    assert main(H100_LLAMA) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        "llama3_8b on dgx-h100 x1 node(s), pytorch-ddp (default preset; --software to choose), "
        "bf16, "
    )
    assert ", sgd (default), global batch 64" in lines[0]
    assert lines[2].startswith("WARNING: optimizer sgd is only the default")
    assert "--optimizer adamw" in lines[2]
    assert main([*H100_LLAMA, "--optimizer", "adamw", "--software", "fsdp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ", fsdp, bf16, adamw, global batch 64" in lines[0]
    assert "(default)" not in lines[0] and "WARNING" not in lines[2]


def test_predict_and_compare_name_the_defaults_alike(capsys) -> None:
    """One wording of the defaults (:func:`perfmodel.cli.headers.job_settings`): predict's
    header said ``pytorch-ddp (default)`` where compare's said ``pytorch-ddp (default preset;
    --software to choose)`` for the same defaults (session 14's read)."""
    job = ["--model", "gpt2", "--global-batch", "64", "--gpus", "8", "--fidelity", "analytic"]
    assert main(["predict", "--system", "dgx-h100", *job]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert main(["compare", "--systems", "dgx-h100,dgx-a100", *job]) == 0
    whatif = capsys.readouterr().out.splitlines()[0]
    settings = "pytorch-ddp (default preset; --software to choose), fp32 (default), sgd (default)"
    assert head.startswith(f"gpt2 on dgx-h100 x1 node(s), {settings}, global batch 64")
    assert whatif.startswith(f"gpt2 on dgx-h100 / dgx-a100, {settings}; 8 GPUs")


def test_json_keeps_stdout_json_and_warns_on_stderr(capsys) -> None:
    assert main([*H100_LLAMA, "--json"]) == 0
    out = capsys.readouterr()
    assert out.out.lstrip().startswith("{") and "WARNING: optimizer sgd" in out.err


def test_no_warning_for_a_cnn_on_default_sgd(capsys) -> None:
    argv = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "32",
            "--fidelity", "analytic"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "sgd (default)" in out.splitlines()[0] and "WARNING" not in out


def test_mfu_names_its_denominator_for_every_precision(capsys) -> None:
    for precision, dtype in (("bf16", "bf16"), ("fp8", "fp8"), ("fp16", "fp16")):
        argv = [*H100_LLAMA[:-4], "--precision", precision, "--fidelity", "analytic"]
        assert main(argv) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if "(MFU " in ln)
        m = re.search(rf"MFU ([\d.]+)% of the {dtype} peak, ([\d.]+) TFLOP/s\)", line)
        assert m, line
        flops = float(line.split()[2])
        # printed to 0.1% and 0.1 TFLOP/s
        assert float(m.group(1)) / 100 == pytest.approx(flops / float(m.group(2)), abs=1.5e-3)


def test_one_statement_of_the_nccl_releases(capsys) -> None:
    """--nccl's help, the P2P note and --explain name the same releases as the code uses."""
    text = nccl_releases()
    assert f"P2P level is {DEFAULT_NCCL_RELEASE.major}.{DEFAULT_NCCL_RELEASE.minor}'s" in text
    assert tuner_for(None, "volta") is NCCL_2_8 and tuner_for(None, "hopper") is NCCL_2_29
    assert f"{NCCL_2_8.release} before Hopper, {NCCL_2_29.release} on Hopper and Blackwell" in text
    argv = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "32",
            "--fidelity", "analytic", "--explain"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "no --nccl: the P2P rule's default release" in out  # the P2P note
    assert "NCCL: no --nccl given: the P2P level is 2.27's" in out
    assert "2.8 before Hopper" in out and "NCCL 2.8 tuner" in out
    assert main([*argv, "--nccl", "2.21"]) == 0
    out = capsys.readouterr().out
    assert "NCCL 2.21 (--nccl): its P2P level and its collective tuner's tables" in out
    assert "the release --nccl states, for the collective tuner too" in out
    assert "NCCL 2.29 tuner" in out


def _recipe(out: str) -> str:
    return out.split("training recipe:", 1)[1].split("where the step goes", 1)[0]


def test_explain_recipe_of_plain_ddp_lists_only_what_runs(capsys) -> None:
    argv = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "32",
            "--fidelity", "analytic", "--explain"]  # fmt: skip
    assert main(argv) == 0
    recipe = _recipe(capsys.readouterr().out)
    assert "precision fp32; optimizer sgd" in recipe  # no "(autocast)": nothing is cast
    for absent in ("param sync", "param gather", "tensor-parallel", "pipeline sends", "attention"):
        assert absent not in recipe, absent
    assert "grad reduction (allreduce) overlapped on stream 'dp'" in recipe
    plan = ["--nodes", "2", "--software", "megatron-core", "--plan", "dp=2,tp=4,pp=2", "--explain"]
    assert main([*H100_LLAMA, *plan]) == 0
    recipe = _recipe(capsys.readouterr().out)
    assert "precision bf16 (half-model)" in recipe and "param sync (allgather)" in recipe
    assert "tensor-parallel comm" in recipe and "pipeline sends" in recipe
    assert "attention backend" in recipe


def test_nccl_defaults_are_formatted_from_the_code_constants(monkeypatch, capsys) -> None:
    """rev15b item 12: ``--nccl``'s help and ``--explain``'s NCCL line read the releases off
    the constants the code uses, not typed text. Before: changing DEFAULT_NCCL_RELEASE or the
    tuner's per-generation default left both saying 2.27 / 2.29."""
    import perfmodel.comm.tuner as tuner
    import perfmodel.topology.nccl_p2p as p2p

    monkeypatch.setattr(p2p, "DEFAULT_NCCL_RELEASE", p2p.NcclRelease(2, 30))
    monkeypatch.setattr(tuner, "DEFAULT_TUNER_MODERN", tuner.NCCL_2_28)
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "without --nccl the P2P level is 2.30's" in helptext
    assert "(2.8 before Hopper, 2.28 on Hopper and Blackwell; --explain names it)" in helptext
    from perfmodel.cli._common import nccl_explain_line

    line = nccl_explain_line(None)
    assert "the P2P level is 2.30's" in line and "2.28 on Hopper and Blackwell" in line


def test_a_curves_range_note_says_what_the_whatif_says(capsys) -> None:
    """The curve's "what the range rests on" line is the what-if's and the systems search's
    (:func:`perfmodel.intervals.wording.basis_clause`): it gave the basis without the bias of
    runs like these (session 14's read)."""
    job = ["--model", "gpt2", "--global-batch", "64", "--fidelity", "analytic"]
    assert main(["predict", "--system", "dgx-h100", *job, "--gpus", "1,8"]) == 0
    note = next(ln for ln in capsys.readouterr().out.splitlines() if "iteration time range" in ln)
    assert main(["compare", "--systems", "dgx-h100", *job, "--gpus", "1,8"]) == 0
    whatif = capsys.readouterr().out.splitlines()
    basis = next(ln for ln in whatif if ln.startswith("  dgx-h100 x")).split(": ", 1)[1]
    assert note.endswith(f": 80% iteration time range {basis}")
    assert "runs like these were predicted" in note and "(median)" in note
