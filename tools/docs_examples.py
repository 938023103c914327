"""Run the command examples of README.md and docs/*.md and check (or rewrite) their outputs.

Every code block of the documentation that shows a command is marked, in an HTML comment on the
line before its opening fence:

``<!-- example -->``
    The block's ``$ COMMAND`` lines are run and the lines after each command, up to the next
    ``$`` line, are its output. ``--check`` (the default; ``tests/test_docs_examples.py`` runs
    it) fails naming every block whose shown output differs from what the command prints now;
    ``--update`` rewrites the outputs in place (the commands stay), as ``perfmodel validate
    --published --update-readme`` does for the accuracy table. A command is ``perfmodel ...``
    (run in this process through :func:`perfmodel.cli.main`) or ``python3 SCRIPT`` (run as
    ``__main__``), optionally piped through ``head -N``, ``tail -N``, ``grep [-E] PATTERN`` or
    ``cut -c1-N``; a trailing ``\\`` continues it on the next line, ``# ...`` ends it. Commands
    run in a scratch folder that sees the repository's data folders, so files they write
    (``--plot``, ``-o``) never land in the checkout.
``<!-- illustrative: REASON -->``
    Not run (it needs a GPU, minutes, a file of the user's, or it is a synopsis); the reason
    is part of the marker.

``<!-- NAME: begin ... -->`` ... ``<!-- NAME: end -->``
    A generated section (:data:`GENERATED`): the text between the markers is what the named
    function returns from the current code (the README's table of the H100 training steps,
    audit 15 item 14d); ``--check`` fails when it differs, ``--update`` rewrites it.

A block that shows a command without either marker is an error (``--check`` lists it), so a new
example is either checked or says why not (issue 28, item 10). Elapsed times and rates in an
output (``in 1.2 s``, ``2.7 scenarios/s``) are compared as ``#``: they vary from run to run.

Usage::

    python3 tools/docs_examples.py            # check every example (exit 1 when one is stale)
    python3 tools/docs_examples.py --update   # rewrite the outputs
    python3 tools/docs_examples.py --list     # the blocks and their markers
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import runpy
import shlex
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The documents whose examples are checked.
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
#: Folders a scratch working directory links to, so the examples' relative paths resolve.
DATA_FOLDERS = ("examples", "calibration", "topologies", "validation", "tests", "docs")

EXAMPLE = re.compile(r"^<!--\s*example\s*-->\s*$")
ILLUSTRATIVE = re.compile(r"^<!--\s*illustrative:\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^```")
#: A line of a code block that is a command a reader may type.
COMMAND = re.compile(r"^\s*(\$ |perfmodel |python3? |pip |OPENBLAS|PYTHONPATH=)")
#: Parts of an output that vary from run to run (elapsed times, rates), compared as ``#``.
VOLATILE = (
    (re.compile(r"\bin \d+(\.\d+)? s\b"), "in # s"),
    (re.compile(r"\b\d+(\.\d+)? scenarios/s\b"), "# scenarios/s"),
)


@dataclass
class Command:
    text: str  # the command as shown (continuations joined)
    shown: list[str]  # the lines of the block that follow it (its shown output)


@dataclass
class Block:
    doc: str
    fence_line: int  # 0-based index of the opening fence in the document's lines
    end_line: int  # index of the closing fence
    marker: str  # "example", "illustrative" or "" (missing)
    reason: str = ""
    body: list[str] = field(default_factory=list)

    @property
    def has_command(self) -> bool:
        return any(COMMAND.match(line) for line in self.body)

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.fence_line + 1}"

    def commands(self) -> list[Command]:
        out: list[Command] = []
        lines = list(self.body)
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("$ "):
                if not out:
                    raise ValueError(f"{self.where}: text before the first '$ ' command: {line!r}")
                out[-1].shown.append(line)
                i += 1
                continue
            text = line[2:]
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            out.append(Command(text, []))
            i += 1
        return out


def blocks(doc: str) -> list[Block]:
    """The fenced code blocks of ``doc`` with their markers."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    out = []
    i = 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            j = i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            prev = lines[i - 1] if i > 0 else ""
            marker, reason = "", ""
            if EXAMPLE.match(prev):
                marker = "example"
            elif m := ILLUSTRATIVE.match(prev):
                marker, reason = "illustrative", m.group(1)
            out.append(Block(doc, i, j, marker, reason, lines[i + 1 : j]))
            i = j + 1
        else:
            i += 1
    return out


# ------------------------------------------------------------------------------- running


def _split_pipes(text: str) -> list[list[str]]:
    parts = [shlex.split(p, comments=True) for p in re.split(r"\s\|\s", text)]
    return [p for p in parts if p]


def _filter(lines: list[str], argv: list[str]) -> list[str]:
    cmd, args = argv[0], argv[1:]
    if cmd in ("head", "tail") and len(args) == 1 and re.fullmatch(r"-\d+", args[0]):
        n = int(args[0][1:])
        return lines[:n] if cmd == "head" else lines[-n:] if n else []
    if cmd == "grep":
        pattern = args[-1]
        return [ln for ln in lines if re.search(pattern, ln)]
    if cmd == "cut" and len(args) == 1 and (m := re.fullmatch(r"-c1-(\d+)", args[0])):
        return [ln[: int(m.group(1))] for ln in lines]
    raise ValueError(f"unsupported filter {' '.join(argv)!r} (head/tail -N, grep, cut -c1-N)")


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary working directory with links to the repository's data folders."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="perfmodel-docs-") as tmp:
        d = Path(tmp)
        for name in DATA_FOLDERS:
            if (ROOT / name).exists():
                (d / name).symlink_to(ROOT / name)
        os.chdir(d)
        try:
            yield d
        finally:
            os.chdir(old)


def run_command(text: str) -> list[str]:
    """Run one example command (in the current directory) and return its output lines."""
    from perfmodel.cli import main

    stages = _split_pipes(text)
    head, filters = stages[0], stages[1:]
    out, err = io.StringIO(), io.StringIO()
    rc: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if head[0] == "perfmodel":
            try:
                rc = main(head[1:])
            except SystemExit as exc:  # argparse's own usage errors
                rc = exc.code
        elif head[0] in ("python", "python3") and len(head) >= 2:
            saved = sys.argv
            sys.argv = head[1:]
            try:
                runpy.run_path(head[1], run_name="__main__")
            except SystemExit as exc:
                rc = exc.code
            finally:
                sys.argv = saved
        else:
            raise ValueError(f"cannot run {text!r} (perfmodel ... or python3 SCRIPT)")
    # stdout is the output; stderr (progress lines, which depend on timing) only with a failure
    lines = (out.getvalue() + (err.getvalue() if rc else "")).splitlines()
    for f in filters:
        lines = _filter(lines, f)
    return [ln.rstrip() for ln in lines]


def _normal(lines: Sequence[str]) -> list[str]:
    out = []
    for ln in lines:
        ln = ln.rstrip()
        for pattern, repl in VOLATILE:
            ln = pattern.sub(repl, ln)
        out.append(ln)
    return out


@dataclass
class Result:
    block: Block
    stale: list[str]  # messages
    new_body: list[str]


def run_block(block: Block) -> Result:
    stale = []
    body: list[str] = []
    for cmd in block.commands():
        got = run_command(cmd.text)
        shown = [ln for ln in cmd.shown]
        if _normal(got) != _normal(shown):
            first = next(
                (i for i, (a, b) in enumerate(zip(_normal(got), _normal(shown))) if a != b),
                min(len(got), len(shown)),
            )
            stale.append(
                f"{block.where}: `{cmd.text}`: output line {first + 1} differs:\n"
                f"    shown: {shown[first] if first < len(shown) else '<nothing>'}\n"
                f"    now:   {got[first] if first < len(got) else '<nothing>'}"
            )
        # keep the command lines as written (continuations included)
        body.extend(_command_lines(block, cmd))
        body.extend(got)
    return Result(block, stale, body)


def _command_lines(block: Block, cmd: Command) -> list[str]:
    """The lines of ``block`` that spell ``cmd`` (the ``$`` line and its continuations)."""
    lines = block.body
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        j = i
        text = line[2:]
        while text.rstrip().endswith("\\") and j + 1 < len(lines):
            j += 1
            text = text.rstrip()[:-1].rstrip() + " " + lines[j].strip()
        if text == cmd.text:
            return lines[i : j + 1]
    return ["$ " + cmd.text]


# ------------------------------------------------------------------------ generated sections

#: A section of a document rewritten from the code, between
#: ``<!-- NAME: begin (generated by `python3 tools/docs_examples.py --update`) -->`` and
#: ``<!-- NAME: end -->``; ``--check`` fails when the text between them is not what
#: :data:`GENERATED` ``[NAME]`` returns now.
SECTION = re.compile(r"^<!--\s*([a-z0-9-]+):\s*(begin|end)\b.*-->\s*$")

#: The H100 profile whose measured training steps the README's table shows.
H100_PROFILE = ROOT / "calibration" / "h100-sxm5-80gb.json"
#: Zoo model name -> the name the README's table uses.
_STEP_MODEL_NAMES = {"resnet50": "ResNet-50", "gpt2": "GPT-2 124M"}


def _pct_err(pred_s: float, meas_s: float) -> str:
    return f"{pred_s * 1e3:.1f} ms ({pred_s / meas_s - 1:+.0%})"


def _predict_cli_s(params: dict) -> float:
    """``perfmodel predict``'s iteration time (s) of a measured step on one GPU of dgx-h100."""
    from perfmodel.calibration.step_workload import OPTIMIZER_OF_STEP

    model = str(params["model"])
    argv = ["predict", "--system", "dgx-h100", "--gpus", "1", "--interval", "off", "--json",
            "--model", model, "--batch-per-gpu", str(params["batch_size"]),
            "--precision", str(params["precision"]),
            "--optimizer", OPTIMIZER_OF_STEP[str(params.get("optimizer", "sgd"))]]  # fmt: skip
    if model == "gpt2":
        args = [f"{k}={params[k]}" for k in ("seq_len", "vocab") if k in params]
        argv += ["--model-arg", *args, "flash_attention=true", "dropout=false"]
    if params.get("memory_format") == "channels_last":
        argv += ["--memory-format", "nhwc"]
    import json

    from perfmodel.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    if rc:
        raise RuntimeError(f"perfmodel {' '.join(argv)} exited {rc}")
    return float(json.loads(out.getvalue())["iteration_time_s"])


def h100_steps_section() -> list[str]:
    """The README's table of the training steps measured on the H100 against the predictions.

    Columns: the measured step (median of 20) and its traced GPU-busy time from
    ``calibration/h100-sxm5-80gb.json``; the compute model's step (``predict_step``, as
    ``tests/validation/test_h100_steps.py``) from datasheet defaults and from the profile's
    fitted parameters, each with the eager host cost ``HOST_DISPATCH_S["pytorch-eager"]``
    and the step's measured memory format; ``perfmodel predict`` on one GPU of ``dgx-h100``
    (datasheet defaults, the ``pytorch-ddp`` preset). The last row is each column's median
    absolute error against the measured step.
    """
    import statistics
    from dataclasses import replace

    from perfmodel.calibration import load_profile
    from perfmodel.calibration.measurement import BenchKind
    from perfmodel.calibration.validate import _step_layout, predict_step, step_workload
    from perfmodel.compute import ComputeParams
    from perfmodel.compute.params import HOST_DISPATCH_S

    host_s = HOST_DISPATCH_S["pytorch-eager"]
    prof = load_profile(H100_PROFILE)
    gpu = prof.device_spec()
    variants = (
        replace(ComputeParams.for_gpu(gpu), host_dispatch_s=host_s),
        replace(prof.compute_params, host_dispatch_s=host_s),
    )
    rows, errs = [], ([], [], [])
    for st in (m for m in prof.measurements if m.kind is BenchKind.STEP):
        p = dict(st.params)
        workload, optimizer = step_workload(st)
        preds = [sum(predict_step(workload, optimizer, gpu, _step_layout(v, gpu, st))[:3])
                 for v in variants]  # fmt: skip
        preds.append(_predict_cli_s(p))
        for e, pred in zip(errs, preds):
            e.append(abs(pred / st.time_s - 1))
        busy = float(p["traced_device_busy_s"])
        label = f"{_STEP_MODEL_NAMES.get(p['model'], p['model'])} b{p['batch_size']}"
        label += f" s{p['seq_len']}" if "seq_len" in p else ""
        label += f" {p['precision']}"
        if st.key.endswith(f"-vocab{p.get('vocab')}"):  # the measured variant of a step
            label += f", vocabulary padded to {p['vocab']}"
        if busy < 0.5 * st.time_s:
            label += " (host-bound)"
        rows.append(f"| {label} | {st.time_s * 1e3:.1f} ms | {busy * 1e3:.1f} ms | "
                    + " | ".join(_pct_err(x, st.time_s) for x in preds) + " |")  # fmt: skip
    return [
        "Training steps measured on that H100 (PyTorch eager, channels_last, median of 20 steps)",
        "against three predictions: the compute model from datasheet defaults and from the full",
        "calibration, both with the eager host model (the host issues the step's kernels ahead of",
        f"the GPU: a step takes at least kernels x {host_s * 1e6:.2f} us;",
        "`tests/validation/test_h100_steps.py`), and `perfmodel predict` on one GPU of `dgx-h100`",
        "(datasheet defaults, the `pytorch-ddp` preset's kernels: casts, loss, the optimizer's",
        "foreach kernels; `--memory-format nhwc`, GPT-2 with `flash_attention=true dropout=false`).",
        "Generated by `python3 tools/docs_examples.py --update`; its check fails when they drift:",
        "",
        "| step | measured | GPU busy | datasheet | full calibration | `perfmodel predict` |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "| median abs. error vs step | | | "
        + " | ".join(f"{statistics.median(e):.0%}" for e in errs)
        + " |",
    ]


#: Generated sections by name (see :data:`SECTION`).
GENERATED = {"h100-steps": h100_steps_section}


def sections(doc: str) -> list[tuple[str, int, int]]:
    """(name, begin line, end line) of the generated sections of ``doc`` (0-based)."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    out, open_ = [], {}
    for i, line in enumerate(lines):
        if (m := SECTION.match(line)) and m.group(1) in GENERATED:
            if m.group(2) == "begin":
                open_[m.group(1)] = i
            elif m.group(1) in open_:
                out.append((m.group(1), open_.pop(m.group(1)), i))
    return out


def check_sections(docs: Sequence[str] = DOCS, *, update: bool = False) -> list[str]:
    """Compare (or, with ``update``, rewrite) every generated section of ``docs``."""
    problems = []
    for d in docs:
        found = sections(d)
        if not found:
            continue
        lines = (ROOT / d).read_text(encoding="utf-8").splitlines()
        for name, begin, end in sorted(found, key=lambda t: -t[1]):
            want = GENERATED[name]()
            if lines[begin + 1 : end] != want:
                if update:
                    lines[begin + 1 : end] = want
                else:
                    problems.append(f"{d}:{begin + 1}: generated section {name!r} is stale")
        if update:
            (ROOT / d).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return problems


def unmarked(docs: Sequence[str] = DOCS) -> list[str]:
    """Blocks that show a command but carry neither marker."""
    return [f"{b.where}: a command block without <!-- example --> or <!-- illustrative: ... -->"
            for d in docs for b in blocks(d) if b.has_command and not b.marker]  # fmt: skip


def check(docs: Sequence[str] = DOCS, *, update: bool = False) -> list[str]:
    """Run every example block; return the problems (stale outputs, unmarked blocks). With
    ``update`` the stale outputs are rewritten first (and not reported)."""
    problems = unmarked(docs) + check_sections(docs, update=update)
    with scratch_dir():
        for d in docs:
            bs = [b for b in blocks(d) if b.marker == "example"]
            results = [run_block(b) for b in bs]
            if update and any(r.stale for r in results):
                lines = (ROOT / d).read_text(encoding="utf-8").splitlines()
                for r in sorted(results, key=lambda r: -r.block.fence_line):
                    b = r.block
                    lines[b.fence_line + 1 : b.end_line] = r.new_body
                (ROOT / d).write_text("\n".join(lines) + "\n", encoding="utf-8")
            elif not update:
                for r in results:
                    problems.extend(r.stale)
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--update", action="store_true", help="rewrite the shown outputs")
    g.add_argument("--list", action="store_true", help="list the blocks and their markers")
    p.add_argument("docs", nargs="*", help="documents (default: README.md and docs/*.md)")
    args = p.parse_args(argv)
    docs = tuple(args.docs) or DOCS
    if args.list:
        for d in docs:
            for b in blocks(d):
                if b.has_command or b.marker:
                    print(f"{b.where:28} {b.marker or 'UNMARKED':13} {b.reason[:70]}")
        return 0
    problems = check(docs, update=args.update)
    for msg in problems:
        print(msg)
    if args.update:
        print(f"examples updated in {', '.join(docs)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
