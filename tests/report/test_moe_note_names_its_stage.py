"""The MoE communication note names the quantity it prints (audit15 item 9): stage 0's
transfers as lowered, while the breakdown's ``exposed comm ep`` is the critical GPU's after the
schedule (``predict ... mixtral_8x7b --plan dp=4,tp=2,pp=4,ep=4`` printed ``148.54 ms exposed``
beside a breakdown's 137.02 ms with nothing saying they differ)."""

from __future__ import annotations

from perfmodel.api import Scenario, predict

SMALL = {"hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "experts": 8,
         "top_k": 2, "seq_len": 512, "vocab": 1024}  # fmt: skip


def test_the_ep_note_says_stage_0_and_points_at_the_breakdown() -> None:
    sc = Scenario(
        system="dgx-h100", model="moe", model_args=SMALL, precision="bf16", optimizer="adam",
        fidelity="analytic", software="megatron-core", ep=4, pp=2, global_batch=16, microbatch=1,
    )  # fmt: skip
    rep = predict(sc, baseline=False)
    note = next(n for n in rep.notes if n.startswith("expert parallel"))
    assert "ms of transfers per step on stage 0, " in note
    assert "ms of them exposed on stage 0 as lowered" in note
    assert note.endswith(
        "the breakdown's 'exposed comm ep' is the critical GPU's, after the schedule"
    )
    assert rep.breakdown.exposed_comm_s.get("ep", 0.0) > 0
