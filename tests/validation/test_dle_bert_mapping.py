"""DeepLearningExamples' PyTorch BERT rows run what its scripts ran (issue 24, wave 2): a 16-bit
model with FP32 master weights in the fused LAMB (no autocast casts), the vocabulary padded to
30528, one FP16 all-reduce after gradient accumulation, and from the 21.11 container nvFuser and
the dense masked-LM head."""

from __future__ import annotations

import pytest

from perfmodel.accuracy import Mapped, map_row
from perfmodel.api import predict, resolve
from perfmodel.compute.validation import DLE_BERT_VOCAB, dle_bert_recipe, predict_row
from perfmodel.errors import ConfigError
from perfmodel.workload import build_model


def _row(rows: list[dict], rid: str) -> dict:
    return next(r for r in rows if r["id"] == rid)


def test_a100_21_11_rows_run_half_model_nvfuser_and_dense_mlm(published_rows: list[dict]) -> None:
    m = map_row(_row(published_rows, "dle-pyt-bert-mn-a100-s128-amp-1n"))
    assert isinstance(m, Mapped)
    sc = m.scenario
    assert sc.software == "pytorch-apex" and sc.compile is True
    assert sc.model_args["vocab"] == DLE_BERT_VOCAB == 30528
    assert sc.model_args["mlm_positions"] == 20
    rc = resolve(sc).recipe
    assert rc is not None
    assert (rc.amp.value, rc.autocast_casts, rc.grad_reduce_bytes) == ("half-model", False, 2)
    assert rc.fusion.value == "compile" and not rc.grad_comm.overlap  # after accumulation
    phase2 = map_row(_row(published_rows, "dle-pyt-bert-mn-a100-s512-amp-1n"))
    assert isinstance(phase2, Mapped) and phase2.scenario.model_args["mlm_positions"] == 80


def test_19_07_rows_run_apex_o2_eager_with_the_full_mlm_head(published_rows: list[dict]) -> None:
    m = map_row(_row(published_rows, "dle-pyt-bert-dgx2h-s128-amp-1n"))
    assert isinstance(m, Mapped)
    sc = m.scenario
    assert sc.software == "pytorch-apex" and not sc.compile
    assert sc.model_args["vocab"] == 30528 and "mlm_positions" not in sc.model_args
    assert resolve(sc).recipe.autocast_casts is False  # type: ignore[union-attr]


def test_other_bert_rows_keep_their_mapping(published_rows: list[dict]) -> None:
    """Lambda's SQuAD fine-tuning rows are not DeepLearningExamples pre-training rows."""
    row = _row(published_rows, "lambda-fp16-bert_large_squad-a10080gbsxm4")
    assert dle_bert_recipe(row) is None
    m = map_row(row)
    assert isinstance(m, Mapped) and m.scenario.software == "pytorch-ddp"


def test_single_gpu_tier_uses_the_same_recipe(published_rows: list[dict]) -> None:
    """The compute tier's 1-GPU rows and the training tier's 1-GPU rows are the same run."""
    row = _row(published_rows, "dle-pyt-bert-1node-a100-s128-amp-1g")
    single = predict_row(row)
    m = map_row(row)
    assert isinstance(m, Mapped)
    assert "masked-LM head on 20 positions" in single.note  # type: ignore[union-attr]
    tier = predict(m.scenario, baseline=False).throughput_samples_per_s
    # the 1-GPU tier has no host, straggler or input pipeline: within a few percent
    assert single.predicted == pytest.approx(tier, rel=0.05)  # type: ignore[union-attr]


def test_dense_mlm_head_runs_on_the_masked_positions() -> None:
    """The decoder GEMM and the loss shrink from ``b s`` to ``b p`` rows: forward FLOP of the
    decoder ``2 b p h V + b p V`` (the product and its bias; BERT-Large, b = 2, p = 20)."""
    full = build_model("bert_large", batch_size=2, seq_len=128, vocab=30528)
    dense = build_model("bert_large", batch_size=2, seq_len=128, vocab=30528, mlm_positions=20)
    dec = next(la for la in dense.layers if la.name == "mlm.decoder")
    assert dec.fwd_flop == pytest.approx(2 * 2 * 20 * 1024 * 30528 + 2 * 20 * 30528)
    assert next(la for la in full.layers if la.name == "mlm.decoder").fwd_flop == pytest.approx(
        2 * 2 * 128 * 1024 * 30528 + 2 * 128 * 30528
    )
    assert dense.params == full.params  # same weights, fewer rows
    assert any(la.name == "mlm.gather" for la in dense.layers)
    with pytest.raises(ConfigError, match="mlm_positions"):
        build_model("bert_large", batch_size=2, seq_len=128, mlm_positions=129)
