"""Issue 15: sweep points stream to the workers (a huge grid writes rows at once, without
computing every key first), and ``--jobs`` is capped at the CPU count with a message."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from perfmodel.search._eval import canonical_key
from perfmodel.search.sweep import SweepSpec, load_results, run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))
from search_fakes import cheap_predict


def test_huge_grid_streams_instead_of_hashing_every_point_first(tmp_path: Path) -> None:
    spec = SweepSpec.from_dict(
        {"base": {"model": "toy"}, "axes": {"x": list(range(300)), "y": list(range(300))}}
    )
    assert len(spec) == 90_000
    keys = 0

    def counting_key(sc):
        nonlocal keys
        keys += 1
        return canonical_key(sc)

    calls = 0

    def stop_after_three(sc):
        nonlocal calls
        calls += 1
        if calls > 3:
            raise KeyboardInterrupt
        return cheap_predict(sc)

    out = tmp_path / "r.jsonl"
    s = run_sweep(
        spec, out, backend="serial", evaluator=stop_after_three, key_fn=counting_key, progress=None
    )
    assert s.interrupted and s.evaluated == 3
    assert len(load_results(out)) == 3
    assert keys <= 10  # before: all 90,000 keys were computed before the first row


def test_jobs_are_capped_at_the_cpu_count(tmp_path: Path) -> None:
    spec = SweepSpec.from_dict({"base": {"model": "toy"}, "axes": {"x": [1, 2]}})
    err = io.StringIO()
    s = run_sweep(
        spec,
        tmp_path / "r.jsonl",
        jobs=100_000,
        backend="joblib",
        evaluator=cheap_predict,
        key_fn=canonical_key,
        progress=err,
    )
    assert s.evaluated == 2
    assert f"--jobs 100000 capped at the {os.cpu_count()} CPUs" in err.getvalue()
