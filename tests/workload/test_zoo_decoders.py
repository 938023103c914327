"""Llama-shaped decoders: ``gpt`` arguments (GQA, head_dim, SwiGLU, RMSNorm, rope, untied) and
the Llama zoo entries, with exact parameter counts against Meta's config.json files."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.workload import build_model, get_model_info
from perfmodel.workload.zoo.transformer import swiglu_ffn_hidden

# config.json of huggingface.co/meta-llama/<model> (hidden_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size; RMSNorm, rope, no
# biases, untied lm_head) and the parameter count of ``model.num_parameters()``.
LLAMA = {
    # name: (hidden, layers, heads, kv_heads, ffn_hidden, vocab, parameters)
    "llama2_7b": (4096, 32, 32, 32, 11008, 32000, 6_738_415_616),
    "llama2_13b": (5120, 40, 40, 40, 13824, 32000, 13_015_864_320),
    "llama2_70b": (8192, 80, 64, 8, 28672, 32000, 68_976_648_192),
    "llama3_8b": (4096, 32, 32, 8, 14336, 128256, 8_030_261_248),
    "llama3_70b": (8192, 80, 64, 8, 28672, 128256, 70_553_706_496),
    "llama3_405b": (16384, 126, 128, 8, 53248, 128256, 405_853_388_800),
}


def _by_hand(h: int, n: int, heads: int, kv: int, f: int, v: int) -> int:
    """Attention q,k,v,o + SwiGLU gate,up,down + 2 RMSNorms per layer; embedding, final norm,
    untied head."""
    d = h // heads
    per_layer = h * (heads * d + 2 * kv * d) + heads * d * h + 3 * h * f + 2 * h
    return n * per_layer + 2 * v * h + h


@pytest.mark.parametrize("name", sorted(LLAMA))
def test_llama_zoo_counts_are_exact(name: str) -> None:
    *shape, expected = LLAMA[name]
    assert _by_hand(*shape) == expected
    w = build_model(name, batch_size=1, seq_len=128)
    assert w.total_params == expected
    args = get_model_info(name).arguments()
    assert args["vocab"] == shape[5] and (args["kv_heads"] or args["heads"]) == shape[3]


def test_gpt_arguments_describe_llama2_7b_exactly() -> None:
    w = build_model(
        "gpt",
        batch_size=1,
        hidden="4096",
        layers="32",
        heads="32",
        ffn_hidden="11008",
        mlp="swiglu",
        norm="rmsnorm",
        bias="false",
        position="rope",
        vocab="32000",
        tied_embeddings="false",
        dropout="false",
        seq_len="128",
    )
    assert w.total_params == 6_738_415_616
    fc1 = next(la for la in w.layers if la.name == "layer0.fc1")
    assert fc1.gemm.n == 2 * 11008 and fc1.params == 4096 * 2 * 11008  # gate + up, no bias
    assert not any(la.name == "embed.positions" for la in w.layers)


def test_gpt_gqa_and_head_dim_shapes() -> None:
    # Qwen3-32B-like: 64 heads x 128 = 8192 query channels on hidden 5120, 8 KV heads
    h, heads, kv, d, f, v = 5120, 64, 8, 128, 25600, 1000
    w = build_model(
        "gpt",
        batch_size=2,
        hidden=h,
        layers=1,
        heads=heads,
        kv_heads=kv,
        head_dim=d,
        ffn_hidden=f,
        mlp="swiglu",
        norm="rmsnorm",
        bias=False,
        position="rope",
        vocab=v,
        tied_embeddings=False,
        seq_len=64,
    )
    qkv = next(la for la in w.layers if la.name == "layer0.qkv")
    out = next(la for la in w.layers if la.name == "layer0.attn_out")
    assert qkv.gemm.n == 8192 + 2 * 1024 and qkv.gemm.k == h
    assert out.gemm.k == 8192 and out.gemm.n == h
    att = next(la for la in w.layers if la.name == "layer0.attention")
    assert att.fwd_flop == 4 * 2 * 64 * 64 * heads * d * 0.5  # causal: 4 b s^2 heads d / 2
    per_layer = h * (8192 + 2048) + 8192 * h + 3 * h * f + 2 * h
    assert w.total_params == per_layer + 2 * v * h + h


def test_gpt_squared_relu_mlp() -> None:
    # Nemotron-4 340B shape (NeMo Nemotron4Config340B): squared-ReLU MLP, GQA, LayerNorm, rope
    h, n, heads, kv, f, v = 18432, 96, 96, 8, 73728, 256000
    w = build_model(
        "gpt",
        batch_size=1,
        hidden=h,
        layers=n,
        heads=heads,
        kv_heads=kv,
        ffn_hidden=f,
        mlp="relu2",
        bias=False,
        position="rope",
        vocab=v,
        tied_embeddings=False,
        seq_len=64,
    )
    d = h // heads
    per_layer = h * (h + 2 * kv * d) + h * h + 2 * h * f + 4 * h  # two LayerNorms of 2h
    assert w.total_params == n * per_layer + 2 * v * h + 2 * h == 341_029_195_776
    act = next(la for la in w.layers if la.name == "layer0.relu2")
    assert act.fwd_flop == 2.0 * 64 * f and act.activation_bytes == 4.0 * 64 * f  # fp32 input


def test_gpt_swiglu_default_width_is_megatrons() -> None:
    assert swiglu_ffn_hidden(4096) == 10880  # int(4 * 4096 * 2 / 3 / 64) * 64
    w = build_model("gpt", batch_size=1, hidden=256, layers=1, heads=4, mlp="swiglu", seq_len=8)
    fc2 = next(la for la in w.layers if la.name == "layer0.fc2")
    assert fc2.gemm.k == swiglu_ffn_hidden(256) == 640


def test_gpt_defaults_unchanged() -> None:
    w = build_model("gpt", batch_size=1)
    assert w.total_params == 124_439_808  # GPT-2 small
    assert any(la.name == "final_ln" for la in w.layers)


@pytest.mark.parametrize(
    ("kw", "where"),
    [
        ({"mlp": "relu3"}, "mlp"),
        ({"norm": "batchnorm"}, "norm"),
        ({"position": "alibi"}, "position"),
        ({"head_dim": 0}, "head_dim"),
        ({"kv_heads": 5}, "kv_heads"),
    ],
)
def test_bad_decoder_arguments_name_the_argument(kw: dict, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_model("gpt", batch_size=1, **kw)
    assert info.value.where == where


def test_aliases_and_suggestions() -> None:
    assert get_model_info("Llama-2-7b").name == "llama2_7b"
    assert get_model_info("llama3.1-405b").name == "llama3_405b"
    assert get_model_info("llama").name == "llama"
    with pytest.raises(ConfigError, match=r"llama3_1_405b \(= llama3_405b\)"):
        get_model_info("llama3_1_404b")


def test_model_list_json_names_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "list", "--json"]) == 0
    data = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert "llama3_1_405b" in data["llama3_405b"]["aliases"]
    assert data["gpt"]["aliases"] == []


def test_model_show_llama3_405b(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "show", "llama3-405b", "--model-arg", "seq_len=128"]) == 0
    assert "405,853,388,800 parameters" in capsys.readouterr().out
