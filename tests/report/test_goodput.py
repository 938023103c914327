"""Energy, failures, checkpoints and goodput of a token budget (perfmodel.report.goodput)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from perfmodel.api import (
    Scenario,
    checkpoint_bytes,
    gpus_per_host,
    predict,
    run_estimate,
    topology_of,
)
from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.report.goodput import (
    IDLE_FRACTION_OF_TDP,
    MTBF_GPU_HOURS,
    MTBF_NODE_HOURS,
    PowerModel,
    Reliability,
    Storage,
    daly_interval_s,
    daly_wall_time_s,
    default_read_Bps,
    default_write_Bps,
    goodput,
    step_energy,
    young_interval_s,
)
from perfmodel.search.cost import Pricing

# ------------------------------------------------------------------------ closed forms, golden


@pytest.mark.parametrize(
    ("mtbf_h", "minutes"),
    [(24.0, 117.0), (6.0, 57.0), (0.25, 9.1)],
)
def test_daly_interval_reproduces_his_worked_examples(mtbf_h: float, minutes: float) -> None:
    """Daly 2006, Figs. 3-5: 5-minute dumps, M = 24 h, 6 h and 15 min -> tau_opt 117, 57 and
    9.1 minutes (rounded as the paper prints them)."""
    tau = daly_interval_s(300.0, mtbf_h * 3600.0) / 60.0
    assert round(tau, 0 if minutes > 10 else 1) == minutes


def test_young_and_daly_agree_when_saves_are_short() -> None:
    # sqrt(2 x 1 s x 1e6 s) = 1414.2 s; Daly's corrections are O(sqrt(delta / 2M)) = 0.07%
    assert young_interval_s(1.0, 1e6) == pytest.approx(1414.2136, rel=1e-6)
    assert daly_interval_s(1.0, 1e6) == pytest.approx(young_interval_s(1.0, 1e6) - 1.0, rel=1e-3)


def test_daly_interval_is_the_mtbf_when_saves_take_longer_than_twice_it() -> None:
    assert daly_interval_s(300.0, 100.0) == 100.0


def test_daly_wall_time_by_hand() -> None:
    # M = 10 h, R = 0, tau = 1 h, delta = 0: T_w = 10 h (e^0.1 - 1) T_s / 1 h = 1.0517 T_s
    t = daly_wall_time_s(100 * 3600.0, 3600.0, 0.0, 0.0, 36000.0)
    assert t / (100 * 3600.0) == pytest.approx(10 * math.expm1(0.1))
    # a restart of R multiplies by e^(R / M)
    t2 = daly_wall_time_s(100 * 3600.0, 3600.0, 0.0, 3600.0, 36000.0)
    assert t2 / t == pytest.approx(math.exp(0.1))


def test_daly_wall_time_overflows_to_infinity() -> None:
    assert daly_wall_time_s(3600.0, 1e6, 1.0, 1.0, 1.0) == math.inf


def test_llama3_rates_give_its_interruptions_back() -> None:
    """The defaults are Table 5's 268 GPU rows per GPU and 151 other rows per server: on the
    run's own 16,384 GPUs in 2,048 servers they give 419 interruptions in 54 days."""
    assert MTBF_GPU_HOURS == pytest.approx(16_384 * 54 * 24 / 268)
    assert MTBF_NODE_HOURS == pytest.approx(2_048 * 54 * 24 / 151)
    m = Reliability().job_mtbf_s(16_384, 2_048)
    assert 54 * 86400 / m == pytest.approx(419)


def test_storage_defaults_follow_the_superpod_table() -> None:
    gb = 1e9
    assert default_write_Bps(8) == 4 * gb and default_read_Bps(8) == 8 * gb
    assert default_write_Bps(40) == 20 * gb  # 5 servers would write 20: the unit's cap
    assert default_write_Bps(64) == 20 * gb and default_read_Bps(64) == 40 * gb
    assert default_write_Bps(257) == 40 * gb  # a second scalable unit
    assert default_write_Bps(16_384) == 1280 * gb


# ------------------------------------------------------------------------------------ power


def test_power_model_reads_the_catalogue() -> None:
    h100 = PowerModel.of(get_gpu("H100-SXM5-80GB"))
    assert h100 is not None
    assert (h100.load_w, h100.idle_w) == (700.0, 88.0)  # sustained_power_W, idle_W
    assert h100.power_w(0.5) == pytest.approx(394.0)
    v100 = get_gpu("V100-SXM2-16GB")  # TDP only: idle is the stated share of it
    pm = PowerModel.of(v100)
    assert pm is not None and pm.load_w == 300.0
    assert pm.idle_w == pytest.approx(IDLE_FRACTION_OF_TDP * 300.0)
    assert "TDP" in pm.idle_basis and pm.load_basis == "datasheet TDP"


def test_power_limited_board_draws_its_limit() -> None:
    """A 500 W H100 whose sustained rates were measured at 700 W draws 500 W under load."""
    pm = PowerModel.of(get_gpu("H100-SXM5-96GB-500W"))
    assert pm is not None and pm.load_w == 500.0


def test_step_energy_by_hand() -> None:
    e = step_energy(
        get_gpu("H100-SXM5-80GB"),
        num_gpus=16,
        iteration_time_s=2.0,
        busy_s=1.0,
        tokens_per_step=1e6,
    )
    assert e is not None
    assert e.power_per_gpu_w == pytest.approx(88 + 612 * 0.5)
    assert e.energy_per_step_j == pytest.approx(16 * 394.0 * 2.0)
    assert e.kwh_per_million_tokens == pytest.approx(16 * 394.0 * 2.0 / 3.6e6)


@given(u=st.floats(0.0, 1.0), v=st.floats(0.0, 1.0))
def test_power_is_monotone_and_bounded(u: float, v: float) -> None:
    pm = PowerModel("x", load_w=1000.0, idle_w=150.0)
    lo, hi = sorted((u, v))
    assert 150.0 <= pm.power_w(lo) <= pm.power_w(hi) <= 1000.0


# --------------------------------------------------------------------------------- goodput


def _run(gpus: int, **kw: object) -> object:
    return goodput(
        ideal_s=30 * 86400.0,
        step_s=5.0,
        gpus=gpus,
        nodes=max(1, gpus // 8),
        checkpoint_bytes=1e12,
        **kw,  # type: ignore[arg-type]
    )


def test_goodput_golden_by_hand() -> None:
    """1,024 GPUs (128 hosts), 1 TB checkpoints, 30 days: every number from the formulas."""
    g = _run(1024)
    m = 3600.0 / (1024 / MTBF_GPU_HOURS + 128 / MTBF_NODE_HOURS)
    assert g.job_mtbf_s == pytest.approx(m)
    w = 4 * 20e9  # 4 scalable units
    assert g.save_s == pytest.approx(1e12 / w)
    assert g.restart_s == pytest.approx(600.0 + 1e12 / (4 * 40e9))
    tau = max(1, round(daly_interval_s(1e12 / w, m) / 5.0)) * 5.0
    assert g.interval_s == pytest.approx(tau)
    wall = daly_wall_time_s(30 * 86400.0, tau, 1e12 / w, g.restart_s, m)
    assert g.wall_s == pytest.approx(wall)
    assert g.goodput == pytest.approx(30 * 86400.0 / wall)
    assert g.expected_interruptions == pytest.approx(wall / m)


def test_optimal_interval_beats_its_neighbours() -> None:
    g = _run(4096)
    for factor in (0.5, 0.8, 1.25, 2.0):
        other = _run(4096, interval_s=g.optimal_interval_s * factor)
        assert other.wall_s >= g.wall_s * (1 - 1e-6)
        assert other.interval_given


@settings(max_examples=30, deadline=None)
@given(small=st.integers(8, 2048), extra=st.integers(1, 8192))
def test_goodput_falls_with_more_gpus(small: int, extra: int) -> None:
    """At a fixed storage bandwidth (the default grows with the GPUs, which shortens saves)."""
    sto = Storage(write_Bps=1e10, read_Bps=2e10)
    a, b = _run(small, storage=sto), _run(small + extra, storage=sto)
    assert 0 < b.goodput <= a.goodput <= 1
    assert a.wall_s >= a.ideal_s


def test_interval_is_whole_steps_and_at_most_the_run() -> None:
    g = goodput(ideal_s=100.0, step_s=7.0, gpus=8, nodes=1, checkpoint_bytes=1e9, interval_s=1e6)
    assert g.interval_s == 100.0  # capped at the run
    g = goodput(ideal_s=1e6, step_s=7.0, gpus=8, nodes=1, checkpoint_bytes=1e9, interval_s=20.0)
    assert g.interval_s == 21.0 and g.interval_steps == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: Reliability(mtbf_gpu_hours=-1.0),
        lambda: Reliability(mtbf_node_hours=0.0),
        lambda: Storage(write_Bps=0.0),
        lambda: Storage(read_Bps=-5.0),
        lambda: Storage(restart_overhead_s=-1.0),
        lambda: Storage(save_s=float("nan")),
        lambda: _run(8, interval_s=0.0),
        lambda: goodput(ideal_s=1.0, step_s=1.0, gpus=8, nodes=1, checkpoint_bytes=-1.0),
    ],
)
def test_bad_values_are_typed_errors(make: object) -> None:
    with pytest.raises(ConfigError):
        make()  # type: ignore[operator]


# ------------------------------------------------------------------------------- the API


def _llama8b(**kw: object) -> Scenario:
    base = dict(
        system="dgx-h100",
        nodes=2,
        model="llama3_8b",
        global_batch=64,
        precision="bf16",
        optimizer="adam",
        software="fsdp",
        fidelity="analytic",
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def test_checkpoint_is_weights_master_and_adam_state() -> None:
    """Megatron: BF16 weights, FP32 master, Adam's two FP32 moments (14 B per parameter);
    FSDP: FP32 sharded weights are the master, plus Adam (12 B); SGD without momentum has no
    state."""
    n = 8_030_261_248
    assert checkpoint_bytes(_llama8b(software="megatron-core")) == pytest.approx(n * 14)
    assert checkpoint_bytes(_llama8b()) == pytest.approx(n * 12)
    assert checkpoint_bytes(_llama8b(optimizer="sgd", software="megatron-core")) == (
        pytest.approx(n * 6)
    )


def test_hosts_are_compute_trays_on_a_rack() -> None:
    assert gpus_per_host(topology_of(Scenario(system="gb200-nvl72"))) == 4
    assert gpus_per_host(topology_of(Scenario(system="dgx-h100", nodes=2))) == 8


def test_run_estimate_ties_the_parts_together() -> None:
    sc = _llama8b()
    rep = predict(sc)
    est = run_estimate(sc, rep, 1e11, pricing=Pricing(2.0))
    budget = rep.token_budget(1e11)
    assert est.goodput.ideal_s == pytest.approx(budget.time_s)
    assert est.goodput.gpus == 16 and est.goodput.nodes == 2
    assert est.cost_ideal == pytest.approx(2.0 * 16 * budget.time_s / 3600)
    assert est.cost_wall >= est.cost_ideal
    tok_s = rep.tokens_per_s
    assert est.cost_per_million_tokens == pytest.approx(
        2.0 * 16 * 1e6 / (tok_s * 3600), rel=1e-2
    )  # whole steps: the budget rounds up to a step
    assert est.energy is not None and est.energy.num_gpus == 16
    d = est.to_dict()
    json.dumps(d)
    assert d["goodput"] == pytest.approx(est.goodput.goodput)


# ---------------------------------------------------------------------------------- the CLI


_PREDICT = [
    "predict",
    "--system",
    "dgx-h100",
    "--nodes",
    "2",
    "--model",
    "llama3_8b",
    "--global-batch",
    "64",
    "--precision",
    "bf16",
    "--optimizer",
    "adam",
    "--software",
    "fsdp",
    "--fidelity",
    "analytic",
]


def test_cli_tokens_prints_goodput_lines(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([*_PREDICT, "--tokens", "1e11", "--price-per-gpu-hour", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    for head in ("interruptions", "checkpoints", "goodput", "energy", "cost", "sources:"):
        assert any(line.lstrip().startswith(head) for line in out.splitlines()), head
    assert "Daly" in out and "Llama 3" in out


def test_cli_tokens_json_and_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            *_PREDICT,
            "--tokens",
            "1e11",
            "--json",
            "--mtbf-gpu-hours",
            "1000",
            "--storage-write-GBps",
            "10",
            "--restart-s",
            "60",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)["training_run"]
    assert d["mtbf_gpu_hours"] == 1000.0 and d["storage_write_Bps"] == 10e9
    assert d["checkpoint_save_s"] == pytest.approx(8_030_261_248 * 12 / 10e9)  # FSDP
    assert d["restart_s"] == pytest.approx(60.0 + d["checkpoint_load_s"])
    assert "--mtbf-gpu-hours given" in d["reliability_source"]
    assert 0 < d["goodput"] < 1


@pytest.mark.parametrize(
    "extra",
    [
        ["--tokens", "1e11", "--mtbf-gpu-hours", "-5"],
        ["--tokens", "1e11", "--storage-write-GBps", "0"],
        ["--tokens", "1e11", "--restart-s", "-1"],
        ["--tokens", "1e11", "--price-per-gpu-hour", "-2"],
        ["--mtbf-node-hours", "100"],  # without --tokens: refused, not ignored
    ],
)
def test_cli_bad_goodput_input_exits_2(
    capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    rc = main([*_PREDICT, *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("perfmodel: error:")


# ------------------------------------------------------------------- energy's range (fix17)


@settings(max_examples=80, deadline=None)
@given(
    busy=st.floats(0.0, 1.0),
    k_lo=st.floats(0.3, 1.0),
    k_hi=st.floats(1.0, 3.0),
    k=st.floats(0.0, 1.0),
    share=st.floats(0.0, 1.0),
)
def test_energy_range_holds_every_attribution_of_the_miss(
    busy: float, k_lo: float, k_hi: float, k: float, share: float
) -> None:
    """fix17 item 3: the step energy's range at the step range's ends holds the energy of any
    step time inside it with any share of the miss in busy seconds, contains the point
    estimate, and at least the step time's own scaling (the busy fraction kept)."""
    from perfmodel.report.goodput import energy_at_step_time, energy_range

    e = step_energy(get_gpu("H100-SXM5-80GB"), num_gpus=8, iteration_time_s=2.0, busy_s=2 * busy)
    lo, hi = energy_range(e, 2.0 * k_lo, 2.0 * k_hi)
    tol = 1e-9 * e.energy_per_step_j
    assert lo - tol <= e.energy_per_step_j <= hi + tol
    assert lo - tol <= e.energy_per_step_j * k_lo and e.energy_per_step_j * k_hi <= hi + tol
    t = 2.0 * (k_lo + k * (k_hi - k_lo))
    inside = energy_at_step_time(e, t, busy_share=share)
    assert lo - tol <= inside <= hi + tol
    assert energy_at_step_time(e, 2.0, busy_share=share) == pytest.approx(e.energy_per_step_j)


@settings(max_examples=80, deadline=None)
@given(
    busy=st.floats(0.0, 1.0),
    k_a=st.floats(0.3, 3.0),
    k_b=st.floats(0.3, 3.0),
    k=st.floats(0.0, 1.0),
    share=st.floats(0.0, 1.0),
)
# two step times one ulp apart below the point estimate: the other end's energy is the larger by
# an ulp (hypothesis found it; the ends agree to rounding, not bit for bit)
@example(busy=0.14402844928164663, k_a=0.30000000000000004, k_b=0.3, k=0.0, share=0.0)
def test_energy_range_holds_a_biased_step_range(
    busy: float, k_a: float, k_b: float, k: float, share: float
) -> None:
    """mend17a item 5: a step range that lies wholly on one side of the point estimate (a
    biased pool: ``r_lo > 0`` or ``r_hi < 0``) still bounds the energy of every step time inside
    it with every share of the miss in busy seconds, and each end is the energy at its step
    time with the miss all busy or all idle (the extremes the old four-end min/max took)."""
    from perfmodel.report.goodput import energy_at_step_time, energy_range

    e = step_energy(get_gpu("H100-SXM5-80GB"), num_gpus=8, iteration_time_s=2.0, busy_s=2 * busy)
    t_lo, t_hi = 2.0 * min(k_a, k_b), 2.0 * max(k_a, k_b)
    lo, hi = energy_range(e, t_lo, t_hi)
    ends = [energy_at_step_time(e, t, busy_share=b) for t in (t_lo, t_hi) for b in (0.0, 1.0)]
    # each end is that extreme to within rounding: two ulps (the @example's is one ulp off)
    assert abs(lo - min(ends)) <= 2 * math.ulp(min(ends))
    assert abs(hi - max(ends)) <= 2 * math.ulp(max(ends))
    tol = 1e-9 * e.energy_per_step_j
    inside = energy_at_step_time(e, t_lo + k * (t_hi - t_lo), busy_share=share)
    assert lo - tol <= inside <= hi + tol


def test_energy_range_by_hand() -> None:
    """8 H100s (88 W idle, 700 W load), 2 s step busy 1.5 s (547 W each: 8,752 J); the step
    takes 1-4 s. Miss in busy seconds: 0.5 s busy of 1 s = 8 x (88 + 612 x 0.5) = 3,152 J, and
    3.5 s busy of 4 s = 8,752 + 8 x 700 x 2 = 19,952 J. Miss in idle seconds: 1 s all busy
    (the 0.5 s idle ran out) = 8 x 700 = 5,600 J; 1.5 s busy of 4 = 8 x (88 x 4 + 612 x 1.5)
    = 10,160 J."""
    from perfmodel.report.goodput import energy_at_step_time, energy_range

    e = step_energy(get_gpu("H100-SXM5-80GB"), num_gpus=8, iteration_time_s=2.0, busy_s=1.5)
    assert energy_at_step_time(e, 1.0, busy_share=0.0) == pytest.approx(5600.0)
    assert energy_at_step_time(e, 4.0, busy_share=0.0) == pytest.approx(10160.0)
    assert energy_at_step_time(e, 1.0, busy_share=1.0) == pytest.approx(3152.0)
    assert energy_range(e, 1.0, 4.0) == pytest.approx((3152.0, 19952.0))


def test_cli_tokens_energy_has_a_range(capsys: pytest.CaptureFixture[str]) -> None:
    """fix17 item 3: with an interval, the energy line is followed by its range (per step and
    for the run), and the JSON's training_run energies can be ranged the same way."""
    rc = main([*_PREDICT, "--tokens", "1e11", "--interval", "0.8"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    i = next(j for j, line in enumerate(lines) if line.startswith("energy "))
    assert "range" in lines[i + 1] and "kJ per step; run" in lines[i + 1]
    assert "power model at the step range's ends" in lines[i + 1]


def test_tokens_text_computes_the_energy_range_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RunEstimate.format_lines`` with a span reads the step's energy range once, for the
    per-step and the run's range alike (it computed it twice)."""
    import perfmodel.report.goodput as goodput

    calls: list[str] = []
    real_range, real_lines = goodput.energy_range, goodput.RunEstimate.format_lines

    def spy_range(*a: object, **k: object) -> tuple[float, float]:
        calls.append("range")
        return real_range(*a, **k)  # type: ignore[arg-type]

    def spy_lines(self: goodput.RunEstimate, span: object = None) -> list[str]:
        calls.append("lines")
        out = real_lines(self, span)  # type: ignore[arg-type]
        calls.append("end")
        return out

    monkeypatch.setattr(goodput, "energy_range", spy_range)
    monkeypatch.setattr(goodput.RunEstimate, "format_lines", spy_lines)
    assert main([*_PREDICT, "--tokens", "1e11", "--interval", "0.8"]) == 0
    assert "kJ per step; run" in capsys.readouterr().out
    inside = calls[calls.index("lines") + 1 : calls.index("end")]
    assert inside == ["range"]
