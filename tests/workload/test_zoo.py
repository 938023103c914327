"""Model zoo: exact parameter counts, FLOP formulas, tensor-parallel shards, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.workload import LayerKind, build_model, get_model_info, list_models

# Reference parameter counts (trainable parameters; Keras V2 rows count BN moving statistics as
# Keras's "Total params" does). Sources: torchvision.models (v0.15 docs' "num_params"), Keras
# applications table, HuggingFace model cards / `model.num_parameters()`, He et al. 2016 CIFAR
# (akamaster/pytorch_resnet_cifar10 table), Llama-2 paper (6.74B).
PARAMS = {
    "lenet5": 61_706,
    "alexnet": 61_100_840,
    "vgg11": 132_863_336,
    "vgg11_bn": 132_868_840,
    "vgg13": 133_047_848,
    "vgg13_bn": 133_053_736,
    "vgg16": 138_357_544,
    "vgg16_bn": 138_365_992,
    "vgg19": 143_667_240,
    "vgg19_bn": 143_678_248,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "resnet20": 269_722,
    "resnet32": 464_154,
    "resnet44": 658_586,
    "resnet56": 853_018,
    "resnet110": 1_727_962,
    "mobilenet_v2": 3_504_872,
    "inception_v3": 27_161_264,
    "vit_b_16": 86_567_656,
    "vit_l_16": 304_326_632,
    "gpt2": 124_439_808,
    "gpt2_medium": 354_823_168,
    "gpt2_large": 774_030_080,
    "gpt2_xl": 1_557_611_200,
    "llama": 6_738_415_616,
}

KERAS_TOTAL = {"resnet50v2": 25_613_800, "resnet101v2": 44_675_560, "resnet152v2": 60_380_648}


@pytest.mark.parametrize(("name", "expected"), sorted(PARAMS.items()))
def test_parameter_counts_match_reference(name: str, expected: int) -> None:
    w = build_model(name, batch_size=2)
    assert w.total_params == expected
    assert w.params == expected  # tp = 1: one rank holds everything


@pytest.mark.parametrize(("name", "expected"), sorted(KERAS_TOTAL.items()))
def test_keras_v2_total_params(name: str, expected: int) -> None:
    w = build_model(name, batch_size=1)
    assert w.total_params + w.buffers == expected


def test_bert_reference_counts() -> None:
    # transformers.BertModel (encoder + pooler): bert-large-uncased / bert-base-uncased
    assert build_model("bert_large", batch_size=1, head="none").total_params == 335_141_888
    assert build_model("bert_base", batch_size=1, head="none").total_params == 109_482_240
    # BertForPreTraining adds the MLM transform (h^2 + h + 2h), decoder bias (vocab, weights tied)
    # and NSP (2h + 2): 336,226,108 for bert-large-uncased
    assert build_model("bert_large", batch_size=1).total_params == 336_226_108


def test_inception_without_aux() -> None:
    assert build_model("inception_v3", batch_size=1, aux_logits=False).total_params == 23_834_568


def test_resnet50_forward_macs_match_published() -> None:
    """He et al. 2016 / torchvision: 4.1 GMAC forward at 224x224 (convolutions + FC)."""
    w = build_model("resnet50", batch_size=1)
    gemm_macs = sum(la.gemm.flop for la in w.layers if la.gemm is not None) / 2
    assert gemm_macs == pytest.approx(4.1e9, rel=0.02)


def test_gpt_flops_match_narayanan_formula() -> None:
    """Narayanan et al. SC21 eq. (without recomputation): 72 B s l h^2 (1 + s/(6h) + V/(12 l h))."""
    b, s, lyr, h, v = 4, 1024, 4, 1024, 51200
    w = build_model(
        "gpt",
        batch_size=b,
        hidden=h,
        layers=lyr,
        heads=16,
        seq_len=s,
        vocab=v,
        flash_attention=False,
    )
    gemm = sum(la.total_flop for la in w.layers if la.kind in (LayerKind.LINEAR, LayerKind.MATMUL))
    expected = 72 * b * s * lyr * h**2 * (1 + s / (6 * h) + v / (12 * lyr * h))
    assert gemm == pytest.approx(expected, rel=0.01)


def test_flash_attention_halves_causal_attention_flop_and_drops_scores() -> None:
    kw = dict(batch_size=2, hidden=512, layers=2, heads=8, seq_len=2048, vocab=1000)
    unfused = build_model("gpt", flash_attention=False, precision="bf16", **kw)
    fused = build_model("gpt", flash_attention=True, precision="bf16", **kw)
    att_unfused = sum(la.fwd_flop for la in unfused.layers if la.kind is LayerKind.MATMUL)
    att_fused = sum(la.fwd_flop for la in fused.layers if la.kind is LayerKind.ATTENTION)
    assert att_fused == pytest.approx(att_unfused / 2)
    # no s x s tensors kept: 5 a s^2 b bytes per layer disappear
    saved_diff = sum(la.activation_bytes for la in unfused.layers) - sum(
        la.activation_bytes for la in fused.layers
    )
    b, s, a, layers = 2, 2048, 8, 2
    lse = 4 * b * a * s * layers  # fp32 log-sum-exp kept by the fused kernel
    assert saved_diff == pytest.approx(5 * a * s * s * b * layers - lse)


def test_lm_head_and_loss_included() -> None:
    w = build_model("gpt2", batch_size=1, seq_len=1024)
    head = next(la for la in w.layers if la.name == "lm_head")
    assert head.params == 0  # tied to the word embedding
    assert head.fwd_flop == pytest.approx(2 * 1024 * 768 * 50257)
    loss = next(la for la in w.layers if la.kind is LayerKind.LOSS)
    assert loss.activation_bytes == 4 * 1024 * 50257  # fp32 softmax over the vocabulary
    untied = build_model("gpt2", batch_size=1, tied_embeddings=False)
    assert untied.total_params == PARAMS["gpt2"] + 50257 * 768


def test_llama_gqa_and_swiglu() -> None:
    w = build_model("llama3_8b", batch_size=1, seq_len=128)
    assert w.total_params == 8_030_261_248  # Meta-Llama-3-8B
    qkv = next(la for la in w.layers if la.name == "layer0.qkv")
    assert qkv.gemm.n == 4096 + 2 * 8 * 128
    fc1 = next(la for la in w.layers if la.name == "layer0.fc1")
    assert fc1.gemm.n == 2 * 14336


def test_blocks_mark_repeated_layers() -> None:
    w = build_model("gpt2", batch_size=1)
    assert sorted({la.block for la in w.layers if la.block is not None}) == list(range(12))
    assert w.layers[0].block is None and w.layers[-1].block is None
    r = build_model("resnet50", batch_size=1)
    assert max(la.block for la in r.layers if la.block is not None) == 15  # 3+4+6+3 units


def test_first_layer_has_no_input_gradient() -> None:
    w = build_model("resnet18", batch_size=8)
    assert w.layers[0].bwd_input_flop == 0
    assert w.layers[0].bwd_weight_flop == pytest.approx(w.layers[0].fwd_flop)
    conv2 = next(la for la in w.layers[1:] if la.kind is LayerKind.CONV)
    assert conv2.bwd_input_flop == conv2.fwd_flop


def test_implicit_gemm_shape_of_a_conv() -> None:
    w = build_model("resnet50", batch_size=4)
    c1 = w.layers[0]
    assert (c1.gemm.m, c1.gemm.n, c1.gemm.k) == (4 * 112 * 112, 64, 3 * 7 * 7)
    assert c1.output_shape == (4, 64, 112, 112)


def test_depthwise_conv_is_grouped() -> None:
    w = build_model("mobilenet_v2", batch_size=1)
    dw = next(la for la in w.layers if la.name == "features.2.dw.conv")
    assert dw.gemm.batch == 96 and dw.gemm.n == 1 and dw.gemm.k == 9


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16", "fp8"])
def test_bytes_follow_precision(precision: str) -> None:
    w = build_model("mlp", batch_size=16, widths=[64, 32, 8], precision=precision)
    a = Precision(precision).activation_bytes
    fc1 = w.layers[0]
    assert fc1.activation_bytes == 16 * 64 * a
    assert (
        fc1.fwd_bytes == (16 * 64 + 16 * 32) * a + (64 * 32 + 32) * Precision(precision).param_bytes
    )


# -- tensor and sequence parallelism ----------------------------------------------------------


def _comm_ops(w, attr):
    return [c.op for la in w.layers for c in getattr(la, attr)]


def test_megatron_tp_shards_and_allreduces() -> None:
    kw = dict(batch_size=2, hidden=1024, layers=3, heads=16, seq_len=256, vocab=32000)
    full = build_model("gpt", **kw)
    tp4 = build_model("gpt", tp=4, **kw)
    assert tp4.total_params == full.total_params
    # sharded: everything but norms, position embeddings and row-parallel biases, divided by 4
    replicated = (
        sum(la.params for la in tp4.layers if la.kind is LayerKind.NORM)
        + sum(1024 for la in tp4.layers if la.name.endswith(("attn_out", "fc2")))
        + 256 * 1024
    )
    assert (tp4.params - replicated) * 4 == pytest.approx(full.params - replicated, rel=1e-9)
    fwd = _comm_ops(tp4, "fwd_comm")
    bwd = _comm_ops(tp4, "bwd_comm")
    # per layer: 2 all-reduces in forward (attn_out, fc2), 2 in backward (qkv, fc1); plus the
    # embedding's forward all-reduce, the LM head's backward one and the vocab-parallel loss
    assert fwd.count(CollectiveOp.ALLREDUCE) == 2 * 3 + 2
    assert bwd.count(CollectiveOp.ALLREDUCE) == 2 * 3 + 1
    attn_out = next(la for la in tp4.layers if la.name == "layer0.attn_out")
    assert attn_out.fwd_comm[0].message_bytes == 2 * 256 * 1024 * 4  # b s h fp32


def test_sequence_parallel_uses_allgather_reducescatter_pairs() -> None:
    kw = dict(batch_size=2, hidden=1024, layers=2, heads=16, seq_len=256, vocab=32000)
    sp = build_model("gpt", tp=4, sequence_parallel=True, precision="bf16", **kw)
    fwd = _comm_ops(sp, "fwd_comm")
    bwd = _comm_ops(sp, "bwd_comm")
    blocks = [la for la in sp.layers if la.block == 0]
    assert [c.op for la in blocks for c in la.fwd_comm] == [
        CollectiveOp.ALLGATHER,
        CollectiveOp.REDUCESCATTER,
        CollectiveOp.ALLGATHER,
        CollectiveOp.REDUCESCATTER,
    ]
    assert [c.op for la in blocks for c in la.bwd_comm] == [
        CollectiveOp.REDUCESCATTER,
        CollectiveOp.ALLGATHER,
        CollectiveOp.REDUCESCATTER,
        CollectiveOp.ALLGATHER,
    ]
    assert CollectiveOp.ALLREDUCE not in bwd
    assert fwd.count(CollectiveOp.ALLREDUCE) == 1  # the vocab-parallel loss statistics
    norm = next(la for la in blocks if la.kind is LayerKind.NORM)
    assert norm.activation_bytes == 2 * 256 * 1024 * 2 / 4


def test_cnn_tp_splits_only_fully_connected_layers() -> None:
    one = build_model("alexnet", batch_size=32)
    two = build_model("alexnet", batch_size=32, tp=2)
    for a, b in zip(one.layers, two.layers):
        if a.kind is LayerKind.CONV:
            assert a.params == b.params and not b.fwd_comm
    fcs = [la for la in two.layers if la.kind is LayerKind.LINEAR]
    assert all(c.op is CollectiveOp.ALLGATHER for la in fcs for c in la.fwd_comm)
    assert fcs[0].params == (9216 * 4096) // 2 + 2048
    assert fcs[0].gemm.m == 64  # hybrid: the FC layers see the group's 2 x 32 samples
    assert two.total_params == one.total_params


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "where"),
    [
        (lambda: build_model("resnet5O", batch_size=1), "model"),
        (lambda: build_model("resnet50", batch_size=-3), "batch_size"),
        (lambda: build_model("resnet50", batch_size=0), "batch_size"),
        (lambda: build_model("resnet50", batch_size=2.5), "batch_size"),
        (lambda: build_model("gpt", batch_size=1, hidden=1000, heads=16), "heads"),
        (lambda: build_model("gpt", batch_size=1, heads=12, tp=8), "tp"),
        (lambda: build_model("llama", batch_size=1, heads=32, kv_heads=5), "kv_heads"),
        (lambda: build_model("vgg16", batch_size=1, image_size=16), "image_size"),
        (lambda: build_model("alexnet", batch_size=1, image_size=32), "image_size"),
        (lambda: build_model("resnet50", batch_size=1, hidden=3), "hidden"),
        (lambda: build_model("resnet", batch_size=1, layers=42), "layers"),
        (lambda: build_model("cifar_resnet", batch_size=1, layers=30), "layers"),
        (lambda: build_model("mlp", batch_size=1, widths="10"), "widths"),
        (lambda: build_model("gpt2", batch_size=1, seq_len=2048), "seq_len"),
        (lambda: build_model("gpt", batch_size=1, precision="fp12"), "precision"),
        (lambda: build_model("gpt", batch_size=1, tp=0), "tp"),
    ],
)
def test_bad_input_names_the_argument(call, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.where == where or where in str(info.value)


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(ConfigError, match="resnet50"):
        get_model_info("resnet5O")


def test_cli_string_args_are_coerced() -> None:
    w = build_model(
        "gpt",
        batch_size=1,
        hidden="256",
        layers="2",
        heads="4",
        seq_len="64",
        vocab="1000",
        flash_attention="false",
        ffn_hidden="1024",
    )
    assert w.model_args["hidden"] == 256 and w.model_args["flash_attention"] is False
    m = build_model("mlp", batch_size=1, widths="10,20,5")
    assert m.total_params == 10 * 20 + 20 + 20 * 5 + 5


def test_list_models_contains_the_cli_names() -> None:
    names = {m.name for m in list_models()}
    required = {
        "resnet50",
        "resnet50v2",
        "resnet152v2",
        "resnet32",
        "resnet44",
        "vgg16",
        "vgg19_bn",
        "alexnet",
        "lenet5",
        "inception_v3",
        "bert_large",
        "gpt2",
        "gpt",
        "llama",
        "mlp",
    }
    assert required <= names
    assert all(m.reference for m in list_models())


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 64),
    hidden_heads=st.sampled_from([(64, 1), (128, 2), (256, 4), (384, 6)]),
    layers=st.integers(1, 3),
    seq=st.sampled_from([16, 64, 128]),
)
def test_costs_scale_linearly_with_batch(batch, hidden_heads, layers, seq) -> None:
    hidden, heads = hidden_heads
    kw = dict(hidden=hidden, heads=heads, layers=layers, seq_len=seq, vocab=500)
    one = build_model("gpt", batch_size=1, **kw)
    many = build_model("gpt", batch_size=batch, **kw)
    assert many.total_flop == pytest.approx(batch * one.total_flop, rel=1e-9)
    assert sum(la.activation_bytes for la in many.layers) == pytest.approx(
        batch * sum(la.activation_bytes for la in one.layers), rel=1e-9
    )
    assert many.params == one.params
    # training FLOP are about 3x forward (dgrad + wgrad), never more than 3.5x
    assert 2.5 * many.fwd_flop < many.total_flop < 3.5 * many.fwd_flop


def test_cnn_tp_elementwise_layers_hold_a_slice() -> None:
    two = build_model("alexnet", batch_size=32, tp=2)
    relu = next(la for la in two.layers if la.name == "fc1.relu")
    assert relu.output_shape == (64, 2048)
    fc2 = next(la for la in two.layers if la.name == "fc2")
    assert fc2.gemm.k == 4096 and fc2.gemm.n == 2048


def test_transformer_xl_layout() -> None:
    """DeepLearningExamples wt103_base.yaml: embedding 267735 x 512 (tied with the adaptive
    softmax), 16 layers of 3,412,480 parameters, shared r_w/r_r biases, softmax biases and
    cluster parameters: 191,950,298 (the README's "192M")."""
    w = build_model("transformer_xl", batch_size=2)
    per_layer = 512 * 1536 + 512 * 512 + 512 * 512 + (512 * 2048 + 2048) + (2048 * 512 + 512)
    per_layer += 2 * 2 * 512  # two LayerNorms
    expected = 267735 * 512 + 16 * per_layer + 2 * 8 * 64 + 267735 + 3 * (512 + 1)
    assert per_layer == 3_412_480
    assert w.total_params == expected == 191_950_298
    qkv = next(la for la in w.layers if la.name == "layer0.qkv")
    assert qkv.gemm.m == 2 * (192 + 192)  # keys over segment + memory
    ac = next(la for la in w.layers if la.name == "layer0.scores_ac")
    assert (ac.gemm.m, ac.gemm.n, ac.gemm.k, ac.gemm.batch) == (192, 384, 64, 16)
    with pytest.raises(ConfigError, match="tp"):
        build_model("transformer_xl", batch_size=1, tp=2)
