"""Issue 28, item 10: every command shown in README.md and docs/*.md is run and its output
compared (``tools/docs_examples.py``; ``--update`` regenerates the outputs after a model change),
or is marked illustrative with the reason."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_examples", ROOT / "tools" / "docs_examples.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_examples", mod)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules["docs_examples"])
    return sys.modules["docs_examples"]


def test_every_shown_output_is_what_the_command_prints() -> None:
    problems = _tool().check()
    assert not problems, (
        "stale or unmarked examples; run `python3 tools/docs_examples.py --update` and review:\n"
        + "\n".join(problems)
    )


def test_every_command_block_is_checked_or_says_why_not() -> None:
    tool = _tool()
    marked = [b for d in tool.DOCS for b in tool.blocks(d) if b.has_command]
    assert marked and all(b.marker for b in marked)
    assert all(b.reason for b in marked if b.marker == "illustrative")
    assert sum(b.marker == "example" for b in marked) >= 15


def test_a_stale_output_and_an_unmarked_block_are_reported(tmp_path: Path) -> None:
    tool = _tool()
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- example -->\n```\n$ perfmodel hw show h100 | head -1\nnot what it prints\n```\n\n"
        "```\nperfmodel predict --system dgx1-v100\n```\n"
    )
    problems = tool.check([str(doc)])
    assert any("without <!-- example -->" in p for p in problems)
    assert any("output line 1 differs" in p for p in problems)
    tool.check([str(doc)], update=True)
    text = doc.read_text()
    assert "not what it prints" not in text and "$ perfmodel hw show h100 | head -1" in text
    assert not [p for p in tool.check([str(doc)]) if "differs" in p]


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("perfmodel hw gpus | head -2", 2),
        ("perfmodel hw gpus | grep -E '^(V100|A100)' | cut -c1-10", None),
    ],
)
def test_filters(text: str, lines: int | None) -> None:
    out = _tool().run_command(text)
    if lines is not None:
        assert len(out) == lines
    else:
        assert out and all(len(ln) <= 10 for ln in out)


def test_the_h100_step_table_is_generated_and_a_stale_one_is_reported(tmp_path: Path) -> None:
    """Audit 15, item 14d: the README's table of the H100 steps is rewritten from the model."""
    tool = _tool()
    assert [name for name, _b, _e in tool.sections("README.md")] == ["h100-steps"]
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- h100-steps: begin (generated) -->\n| ResNet-50 b128 | 30.0 ms |\n"
                   "<!-- h100-steps: end -->\n")  # fmt: skip
    assert any("'h100-steps' is stale" in p for p in tool.check_sections([str(doc)]))
    tool.check_sections([str(doc)], update=True)
    text = doc.read_text()
    assert "30.0 ms |\n" not in text and "| median abs. error vs step |" in text
    assert text.count("| ResNet-50 ") == 4 and text.count("| GPT-2 124M ") == 3
    assert not tool.check_sections([str(doc)])


def test_every_stated_host_cost_per_kernel_is_the_constant() -> None:
    """Audit 15, item 14e: the docs state the eager host cost per kernel as the code fits it
    (``HOST_DISPATCH_S["pytorch-eager"]``, ``tests/calibration/test_host_fit.py``); lines that
    give an earlier value as history say so ("at the time", "before")."""
    import re

    from perfmodel.compute.params import HOST_DISPATCH_S

    want = f"{HOST_DISPATCH_S['pytorch-eager'] * 1e6:.2f}"
    stated = re.compile(r"per (modelled )?kernel|kernels x|host cost per kernel")
    seen = 0
    for doc in _tool().DOCS:
        for n, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
            if not stated.search(line) or re.search(r"at the time|before", line):
                continue
            for value in re.findall(r"\b(3\d\.\d\d) us\b", line):
                seen += 1
                assert value == want, f"{doc}:{n} states {value} us, the code {want} us: {line}"
    assert seen >= 5


def _paragraph(start: str) -> str:
    """The README paragraph (or list item) that begins with ``start``, joined into one line."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    i = text.index(start)
    end = min(j for j in (text.find("\n\n", i), text.find("\n- ", i)) if j >= 0)
    return " ".join(text[i:end].split())


def test_the_readme_lists_every_catalogue_system() -> None:
    """Audit 15, item 14b: the catalogue sentence names `perfmodel topo list`'s systems."""
    import re

    from perfmodel.topology.builders import list_systems

    para = _paragraph("Catalogue (`perfmodel topo list`)")
    named = {t for t in re.findall(r"`([^`]+)`", para) if re.fullmatch(r"[a-z0-9][a-z0-9.-]*", t)}
    assert named == set(list_systems())


def test_the_readme_lists_every_preset_and_plan_key() -> None:
    """Audit 15, item 14c: the preset list is `PRESETS` (``deepspeed-zero1..3`` spelled out)
    and the `--plan` keys are the plan parser's (``perfmodel.parallel.plan._PLAN_KEYS``)."""
    import re

    from perfmodel.parallel.plan import _PLAN_KEYS
    from perfmodel.parallel.software import PRESETS

    para = _paragraph("- Software presets")
    listed = para[para.index("format): ") : para.index(". PyTorch stacks")]
    names = set()
    for t in re.findall(r"`([^`]+)`", listed):
        if m := re.fullmatch(r"(.*?)(\d+)\.\.(\d+)", t):
            names |= {f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)}
        else:
            names.add(t)
    assert names == set(PRESETS)
    plan = _paragraph("- Plans: `--plan`")
    keys = {m.split("=")[0] for m in re.findall(r"`([a-z_]+=[^`]*)`", plan)} - {"key"}
    assert keys == set(_PLAN_KEYS)


def test_the_readmes_validated_range_promise_is_what_predict_says() -> None:
    """Audit 15, item 14g: the README quotes the warning of a GPU architecture without
    published runs as predict prints it, and says what a datasheet-only GPU of a validated
    architecture gets instead (its architecture's range, a note that it has no run of its own, a
    hardware line)."""
    import json
    import re

    para = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    quoted = re.search(r'says so \("(outside the validated range: [^"]+)"', para)
    assert quoted is not None
    llama = ("--model llama3_8b --global-batch 32 --precision bf16 --software torchtitan "
             "--fidelity analytic --json")  # fmt: skip
    run = _tool().run_command
    mi300x = json.loads("\n".join(run(f"perfmodel predict --system mi300x-8 {llama}")))
    assert mi300x["interval_warning"] == quoted.group(1)
    h20 = json.loads("\n".join(run(
        "perfmodel predict --system custom --gpu H20-96GB --gpus-per-node 8 "
        f"--intra-node nvswitch-v3 {llama}"
    )))  # fmt: skip
    assert h20["interval_level"] and not str(h20.get("interval_warning") or "").startswith("out")
    shown = re.search(r'the report says "(hardware: H20-96GB figures are datasheet only) ', para)
    assert shown is not None and shown.group(1) in " ".join(h20["printed_notes"])
    note = re.search(
        r"range's note says \"(no published run on H20-96GB itself [^.]+) \.\.\.", para
    )
    assert note is not None and h20["interval_warning"].startswith(note.group(1))
