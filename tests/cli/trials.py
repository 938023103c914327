"""Bad-input trials of issue 15: each is a command line a hostile user could type.

``python3 -m tests.cli.trials`` runs every trial in a subprocess (with a timeout) and prints a
table: exit status, whether a traceback was printed, whether a hang occurred and whether a file
that must not change changed. ``tests/cli/test_trials.py`` runs the same trials in-process and
asserts exit 2, no traceback and no changed file.

A trial is ``(name, argv, guarded)``: ``guarded`` are files the command must leave unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "calibration" / "h100-sxm5-80gb.json"
NCCL_LOG = ROOT / "tests" / "fixtures" / "nccl" / "a3mega-h100-2node-all_reduce.txt"
NCCL_XML = ROOT / "tests" / "fixtures" / "topology" / "nccl-dgx1-v100.xml"
SWEEP = ROOT / "examples" / "sweeps" / "resnet50-scaling.toml"
TOPO = ROOT / "topologies" / "dgx1-v100.toml"

PRED = ["--model", "resnet50", "--batch-per-gpu", "32", "--fidelity", "analytic"]


@dataclass
class Trial:
    name: str
    argv: list[str]
    guarded: list[Path] = field(default_factory=list)
    expect: int = 2


def _small_profile() -> dict:
    """The shipped H100 profile, trimmed to a few measurements (fast to load)."""
    d = json.loads(PROFILE.read_text())
    d["measurements"] = d["measurements"][:5]
    return d


def make_trials(tmp: Path) -> list[Trial]:
    """Write the bad input files under ``tmp`` and return the trials."""
    tmp.mkdir(parents=True, exist_ok=True)
    t: list[Trial] = []

    def w(name: str, data: str | bytes) -> Path:
        p = tmp / name
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
        return p

    # --- damage 1: sweep -o on a file the sweep did not write
    sweep = w("grid.toml", SWEEP.read_text())
    for name, data in (
        ("data.csv", "a,b,c\n1,2,3\n4,5,6"),
        ("data.jsonl", '{"x": 1}\n{"x": 2}\n{"x": 3'),
        ("bin.csv", bytes(range(256)) * 4),
        ("u16.csv", "a,b\n1,2\n3,4".encode("utf-16")),
        ("u16.jsonl", '{"x": 1}\n{"x'.encode("utf-16")),
    ):
        out = w(name, data)
        t.append(Trial(f"sweep -o unrelated {name}", ["sweep", str(sweep), "-o", str(out)], [out]))

    # --- damage 2: calibrate with NaN/inf in an nccl-tests log never writes non-finite values
    good = w("good-profile.json", json.dumps(_small_profile(), indent=2))
    log = NCCL_LOG.read_text().splitlines(keepends=True)
    for bad in ("nan", "inf"):
        rows = [i for i, ln in enumerate(log) if ln.strip() and ln.strip()[0].isdigit()]
        lines = list(log)
        parts = lines[rows[-1]].split()
        parts[5] = bad  # out-of-place time
        lines[rows[-1]] = "  ".join(parts) + "\n"
        lg = w(f"log-{bad}.txt", "".join(lines))
        t.append(
            Trial(
                f"comm --compare log with {bad}",
                ["comm", "--system", "dgx-h100", "--nodes", "2", "--compare", str(lg)],
            )
        )
        t.append(
            Trial(
                f"calibrate --nccl-log with {bad}",
                [
                    "calibrate",
                    "--nccl-log",
                    str(lg),
                    "--link",
                    "infiniband",
                    "--op",
                    "allreduce",
                    "-o",
                    str(good),
                ],
                [good],
            )
        )

    notes = w("notes.json", '{"my": "notes"}\n')
    t.append(
        Trial(
            "calibrate -o an unrelated JSON",
            ["calibrate", "--nccl-log", str(NCCL_LOG), "--link", "infiniband", "--op", "allreduce",
             "-o", str(notes)],
            [notes],
        )
    )  # fmt: skip

    # --- non-UTF-8 input on every file argument
    latin = "# caf\xe9\n".encode("latin-1") + b"\xff\xfe\x00garbage\n"
    bad_toml = w("bad.toml", latin)
    bad_json = w("bad.json", latin)
    bad_jsonl = w("bad.jsonl", latin)
    bad_txt = w("bad.txt", latin)
    bad_xml = w("bad.xml", latin)
    t += [
        Trial("predict scenario non-utf8", ["predict", str(bad_toml)]),
        Trial("predict --system non-utf8", ["predict", "--system", str(bad_toml), *PRED]),
        Trial(
            "predict --calibration non-utf8",
            ["predict", "--system", "dgx1-v100", *PRED, "--calibration", str(bad_json)],
        ),
        Trial(
            "comm --link-params non-utf8",
            ["comm", "--system", "dgx1-v100", "--link-params", str(bad_toml)],
        ),
        Trial(
            "comm --compare non-utf8", ["comm", "--system", "dgx1-v100", "--compare", str(bad_txt)]
        ),
        Trial("topo import non-utf8 xml", ["topo", "import", str(bad_xml)]),
        Trial("topo import non-utf8 txt", ["topo", "import", str(bad_txt)]),
        Trial(
            "compare --tta-data non-utf8",
            [
                "compare",
                "--tta-data",
                str(bad_jsonl),
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
            ],
        ),
        Trial("sweep spec non-utf8", ["sweep", str(bad_toml), "-o", str(tmp / "o1.jsonl")]),
        Trial("sweep -o non-utf8 jsonl", ["sweep", str(sweep), "-o", str(bad_jsonl)], [bad_jsonl]),
        Trial(
            "validate --profile non-utf8",
            ["validate", "--profile", str(bad_json), "-o", str(tmp / "v1")],
        ),
        Trial(
            "validate --measurements non-utf8",
            ["validate", "--measurements", str(bad_jsonl), "-o", str(tmp / "v2")],
        ),
        Trial(
            "calibrate --refit non-utf8",
            ["calibrate", "--refit", str(bad_json), "-o", str(tmp / "r.json")],
        ),
        Trial(
            "calibrate --resume non-utf8",
            ["calibrate", "--resume", "-o", str(bad_json), "--budget", "1s", "--only", "launch"],
            [bad_json],
        ),
    ]

    # --- a directory where a file is expected
    d = tmp / "adir"
    d.mkdir(exist_ok=True)
    t += [
        Trial("predict scenario dir", ["predict", str(d)]),
        Trial("predict --system dir.toml", ["predict", "--system", str(tmp), *PRED]),
        Trial("sweep spec dir", ["sweep", str(d), "-o", str(tmp / "o2.jsonl")]),
        Trial("sweep -o dir", ["sweep", str(sweep), "-o", str(tmp / "adir.jsonl")]),
        Trial(
            "calibrate -o dir",
            ["calibrate", "--nccl-log", str(NCCL_LOG), "--link", "infiniband", "-o", str(d)],
        ),
        Trial("comm --compare dir", ["comm", "--system", "dgx1-v100", "--compare", str(d)]),
        Trial("topo import dir", ["topo", "import", str(d)]),
        Trial(
            "predict --trace dir",
            ["predict", "--system", "dgx1-v100", *PRED, "--trace", str(d)],
        ),
        Trial(
            "predict --plot dir",
            ["predict", "--system", "dgx1-v100", *PRED, "--gpus", "1,2", "--plot", str(d)],
        ),
    ]
    (tmp / "adir.jsonl").mkdir(exist_ok=True)

    # --- output not writable
    ro = tmp / "ro"
    ro.mkdir(exist_ok=True)
    os.chmod(ro, 0o555)
    loop = tmp / "loop.jsonl"
    if not loop.is_symlink():
        os.symlink(loop, loop)
    notdir = w("plainfile", "x")
    full = tmp / "full.jsonl"
    if not full.is_symlink() and os.path.exists("/dev/full"):
        os.symlink("/dev/full", full)
    # root writes into a read-only folder: there these commands rightly succeed
    ro_rc = 0 if hasattr(os, "geteuid") and os.geteuid() == 0 else 2
    t += [
        Trial(
            "sweep -o read-only dir",
            ["sweep", str(sweep), "-o", str(ro / "x.jsonl")],
            expect=ro_rc,
        ),
        Trial("sweep -o under a file", ["sweep", str(sweep), "-o", str(notdir / "x.jsonl")]),
        Trial("sweep -o symlink loop", ["sweep", str(sweep), "-o", str(loop)]),
        Trial("sweep -o symlink to /dev/full", ["sweep", str(sweep), "-o", str(full)]),
        Trial(
            "predict --calibration /dev/zero",
            ["predict", "--system", "dgx1-v100", *PRED, "--calibration", "/dev/zero"],
        ),
        Trial("topo import /dev/zero", ["topo", "import", "/dev/zero"]),
        Trial("topo import a FIFO", ["topo", "import", str(_fifo(tmp))]),
        Trial(
            "topo import --p2p-status a FIFO",
            ["topo", "import", str(NCCL_XML), "--p2p-status", str(_fifo(tmp))],
        ),
        Trial(
            "topo import --p2p-status non-utf8",
            ["topo", "import", str(NCCL_XML), "--p2p-status", str(bad_txt)],
        ),
        Trial(
            "model import-chakra a FIFO",
            ["model", "import-chakra", str(_fifo(tmp)), "--batch", "8"],
        ),
        Trial(
            "model import-chakra --batch -8", ["model", "import-chakra", "x.et", "--batch", "-8"]
        ),
        Trial(
            "validate --update-readme a FIFO",
            ["validate", "--published", "--update-readme", str(_fifo(tmp))],
        ),
        Trial(
            "calibrate -o read-only dir",
            [
                "calibrate",
                "--nccl-log",
                str(NCCL_LOG),
                "--link",
                "infiniband",
                "-o",
                str(ro / "p.json"),
            ],
            expect=ro_rc,
        ),
        Trial(
            "calibrate -o under a file",
            [
                "calibrate",
                "--nccl-log",
                str(NCCL_LOG),
                "--link",
                "infiniband",
                "-o",
                str(notdir / "p.json"),
            ],
        ),
        Trial(
            "predict --trace read-only",
            ["predict", "--system", "dgx1-v100", *PRED, "--trace", str(ro / "t.json")],
            expect=ro_rc,
        ),
        Trial(
            "validate -o under a file",
            ["validate", "--profile", str(PROFILE), "-o", str(notdir / "v")],
        ),
    ]

    # --- wrongly typed fields of profiles and measurements
    for label, path_, value in (
        ("memory_bytes lots", ("device", "memory_bytes"), "lots"),
        ("fits values fast", ("fits", "memory.copy", "values"), "fast"),
        ("measurements 5", ("measurements",), 5),
        ("compute_params none", ("compute_params",), "none"),
        ("time_s fast", ("measurements", 0, "time_s"), "fast"),
        ("device list", ("device",), [1]),
        ("format_version text", ("format_version",), "one"),
        ("format_version future", ("format_version",), 99),
        ("peak_flops text", ("compute_params", "peak_flops"), "fast"),
        ("params list", ("measurements", 0, "params"), [1, 2]),
    ):
        d2 = _small_profile()
        cur = d2
        for k in path_[:-1]:
            cur = cur[k]
        cur[path_[-1]] = value
        pf = w(f"prof-{label.replace(' ', '_')}.json", json.dumps(d2))
        t.append(
            Trial(
                f"predict --calibration {label}",
                [
                    "predict",
                    "--system",
                    "dgx1-v100",
                    "--gpu",
                    "H100-SXM5-80GB",
                    *PRED,
                    "--calibration",
                    str(pf),
                ]
                if False
                else ["predict", "--system", "hgx-h200", *PRED, "--calibration", str(pf)],
            )
        )
        t.append(
            Trial(
                f"calibrate --refit {label}",
                ["calibrate", "--refit", str(pf), "-o", str(tmp / "rf.json")],
            )
        )
        t.append(
            Trial(
                f"compare --calibration {label}",
                [
                    "compare",
                    "--system",
                    "hgx-h200",
                    "--model",
                    "resnet50",
                    "--global-batch",
                    "64",
                    "--calibration",
                    str(pf),
                    "--no-screen",
                ],
            )
        )

    # --- other wrongly typed fields
    topo = TOPO.read_text()
    t_count = w("t-count.toml", re.sub(r"count = \d+", 'count = "two"', topo, count=1))
    t_nics = w("t-nics.toml", topo.replace("nics_per_node = 4", "nics_per_node = 0"))
    t_lat = w("t-lat.toml", topo.replace("[[link]]", '[[link]]\nlatency_us = "fast"', 1))
    xml = NCCL_XML.read_text()
    x_count = w(
        "x-count.xml", xml.replace('count="', 'count="lots" x="', 1) if 'count="' in xml else xml
    )
    lp = w("lp.toml", '[nvlink]\nalpha_us = "fast"\nbandwidth_GBps = 20\n')
    sc1 = w("sc1.toml", 'system = ["dgx1-v100"]\nmodel = "resnet50"\nbatch_per_gpu = 32\n')
    sc2 = w(
        "sc2.toml",
        'system = "dgx1-v100"\nmodel = "resnet50"\nbatch_per_gpu = 32\nmodel_args = [1, 2]\n',
    )
    sc3 = w("sc3.toml", 'system = "dgx1-v100"\nmodel = "resnet50"\nbatch_per_gpu = 32\nplan = 5\n')
    t += [
        Trial("topology count two", ["predict", "--system", str(t_count), *PRED]),
        Trial(
            "topology nics_per_node 0", ["predict", "--system", str(t_nics), "--nodes", "2", *PRED]
        ),
        Trial("topology latency fast", ["predict", "--system", str(t_lat), *PRED]),
        Trial("nccl xml count lots", ["topo", "import", str(x_count)]),
        Trial(
            "link-params alpha fast", ["comm", "--system", "dgx1-v100", "--link-params", str(lp)]
        ),
        Trial("scenario system list", ["predict", str(sc1)]),
        Trial("scenario model_args list", ["predict", str(sc2)]),
        Trial("scenario plan 5", ["predict", str(sc3)]),
    ]

    # --- numbers
    sysargs = ["predict", "--system", "dgx1-v100", *PRED]
    t += [
        Trial(
            "oversubscription nan 32 nodes",
            [*sysargs, "--nodes", "32", "--fabric", "fat-tree", "--oversubscription", "nan"],
        ),
        Trial(
            "oversubscription 0 32 nodes",
            [*sysargs, "--nodes", "32", "--fabric", "fat-tree", "--oversubscription", "0"],
        ),
        Trial(
            "oversubscription -1 2 nodes", [*sysargs, "--nodes", "2", "--oversubscription", "-1"]
        ),
        Trial(
            "oversubscription inf 2 nodes", [*sysargs, "--nodes", "2", "--oversubscription", "inf"]
        ),
        Trial("nodes 0", [*sysargs, "--nodes", "0"]),
        Trial("long --system", ["predict", "--system", "x" * 20000, *PRED]),
        Trial("gpus empty", [*sysargs, "--gpus", ""]),
        Trial("model-arg layers=true", ["model", "show", "gpt", "--model-arg", "layers=true"]),
        Trial("model-arg num_classes=-5", [*sysargs, "--model-arg", "num_classes=-5"]),
        Trial(
            "compare --no-screen --jobs 0",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--no-screen",
                "--jobs",
                "0",
            ],
        ),
        Trial(
            "compare --top 0",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--top",
                "0",
            ],
        ),
        Trial(
            "compare --top -3",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--top",
                "-3",
            ],
        ),
        Trial(
            "compare --analytic-k -1",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--analytic-k",
                "-1",
            ],
        ),
        Trial(
            "compare --jobs -3",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--jobs",
                "-3",
            ],
        ),
        Trial(
            "compare --schedules empty",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--schedules",
                "",
            ],
        ),
        Trial(
            "compare --plot x.qqq",
            [
                "compare",
                "--system",
                "dgx1-v100",
                "--model",
                "resnet50",
                "--global-batch",
                "64",
                "--plot",
                str(tmp / "x.qqq"),
            ],
        ),
        Trial(
            "compare --systems warp=9",
            [
                "compare",
                "--systems",
                "dgx1-v100:warp=9",
                "--model",
                "resnet50",
                "--batch-per-gpu",
                "32",
                "--gpus",
                "1,2",
            ],
        ),
        Trial("comm --sizes 10GB", ["comm", "--system", "dgx1-v100", "--sizes", "1GB:10GB"]),
        Trial("comm --sizes nan", ["comm", "--system", "dgx1-v100", "--sizes", "nan:1M"]),
        Trial(
            "predict --plot speed.xyz",
            [*sysargs, "--gpus", "1,2", "--plot", str(tmp / "speed.xyz")],
        ),
        Trial(
            "calibrate --step mlp:0:fp32",
            [
                "calibrate",
                "--step",
                "mlp:0:fp32",
                "--only",
                "steps",
                "--budget",
                "1s",
                "-o",
                str(tmp / "s.json"),
            ],
        ),
        Trial(
            "calibrate --step nosuch:8:fp32",
            [
                "calibrate",
                "--step",
                "nosuch:8:fp32",
                "--only",
                "steps",
                "--budget",
                "1s",
                "-o",
                str(tmp / "s2.json"),
            ],
        ),
        Trial(
            "maxbatch fp8 on K20",
            ["model", "maxbatch", "resnet50", "--gpu", "K20", "--precision", "fp8"],
        ),
        Trial(
            "validate --published bad json",
            [
                "validate",
                "--profile",
                str(PROFILE),
                "--published",
                str(_pub(tmp)),
                "-o",
                str(tmp / "v3"),
            ],
        ),
        Trial("sweep --jobs 0", ["sweep", str(sweep), "-o", str(tmp / "o3.jsonl"), "--jobs", "0"]),
        Trial(
            "sweep --jobs -3", ["sweep", str(sweep), "-o", str(tmp / "o4.jsonl"), "--jobs", "-3"]
        ),
    ]
    short = w("short.csv", _short_csv())
    t.append(
        Trial(
            "sweep --retry-errors short row",
            ["sweep", str(sweep), "-o", str(short), "--retry-errors"],
            [short],
        )
    )
    return t


def _fifo(tmp: Path) -> Path:
    p = tmp / "fifo.txt"
    if not p.exists() and hasattr(os, "mkfifo"):
        os.mkfifo(p)
    return p


def _pub(tmp: Path) -> Path:
    d = tmp / "pub"
    d.mkdir(exist_ok=True)
    (d / "published.jsonl").write_text('{"kind": "gemm", \n')
    return d


def _short_csv() -> str:
    from perfmodel.search.sweep_file import _META_COLUMNS, ROW_COLUMNS

    header = [*_META_COLUMNS, "gpus", "precision", "system", *ROW_COLUMNS]
    return ",".join(header) + "\nabc\n"


def run_subprocess(trial: Trial, timeout: float = 60.0) -> dict:
    """Run one trial as ``python3 -m perfmodel`` and classify the outcome."""
    import hashlib
    import subprocess
    import sys

    def digest(p: Path) -> str | None:
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None

    before = {p: digest(p) for p in trial.guarded}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "perfmodel", *trial.argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
        rc, err, hang = r.returncode, r.stderr, False
    except subprocess.TimeoutExpired:
        rc, err, hang = None, "", True
    changed = [str(p) for p in trial.guarded if digest(p) != before[p]]
    return {
        "name": trial.name,
        "rc": rc,
        "traceback": "Traceback" in err,
        "hang": hang,
        "changed": changed,
        "last": err.strip().splitlines()[-1][:150] if err.strip() else "",
    }


def main() -> None:  # pragma: no cover - a manual tool
    import sys
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="trials-"))
    pat = sys.argv[1] if len(sys.argv) > 1 else ""
    trials = [tr for tr in make_trials(tmp) if pat in tr.name]
    counts = {"traceback": 0, "exit0": 0, "hang": 0, "damage": 0, "other": 0, "ok": 0}
    for tr in trials:
        r = run_subprocess(tr)
        kind = (
            "hang"
            if r["hang"]
            else "damage"
            if r["changed"]
            else "traceback"
            if r["traceback"]
            else "ok"
            if r["rc"] == tr.expect
            else "exit0"
            if r["rc"] == 0
            else "other"
        )
        counts[kind] += 1
        print(f"{kind:9} rc={r['rc']!s:4} {tr.name:40} {r['last']}", flush=True)
    print(counts)
    os.chmod(tmp / "ro", 0o755)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    main()
