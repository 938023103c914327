"""Zoo builders whose keyword arguments come from a table (``workload/zoo/_args.py``, issue 29):
the signature the zoo reads is the table, a call checks its arguments as a written signature
would, and a variant builder is its base builder with pinned settings."""

from __future__ import annotations

import ast
import inspect
import pydoc
from collections.abc import Callable
from typing import Any

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload import build_model, get_model_info, zoo
from perfmodel.workload._net import Net
from perfmodel.workload.zoo import cnn, frontier, moe, transformer


def _defaults(fn: object) -> dict[str, object]:
    params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    return {k: p.default for k, p in params.items() if k != "net"}


def test_table_signature_is_the_table_in_order() -> None:
    assert _defaults(moe.moe) == moe.MOE_DEFAULTS
    assert list(_defaults(moe.moe)) == list(moe.MOE_DEFAULTS)
    assert _defaults(frontier.deepseek_v3) == {"mtp_layers": 0, **moe.MOE_DEFAULTS}
    grok = _defaults(frontier.grok1)
    assert (grok["hidden"], grok["experts"], grok["expert_ffn_hidden"]) == (6144, 8, 32768)
    assert list(grok)[-3:] == ["load_imbalance", "capacity_factor", "flash_attention"]


@pytest.mark.parametrize("builder", [frontier.gpt_oss, frontier.llama4, frontier.grok1, moe.moe])
def test_table_builder_rejects_unknown_and_positional_arguments(builder: object) -> None:
    net = Net(1, Precision.BF16)
    with pytest.raises(TypeError):
        builder(net, not_an_argument=1)  # type: ignore[operator]
    with pytest.raises(TypeError):
        builder(net, 4096)  # type: ignore[operator]


def test_llama_is_gpt_with_llama_settings() -> None:
    """``llama`` takes a subset of ``gpt``'s arguments with Llama-2-7B defaults and builds what
    ``gpt`` builds with the Llama settings pinned."""
    names = list(_defaults(transformer.llama))
    assert names == list(transformer._LLAMA_ARGS)
    assert set(names) <= set(_defaults(transformer.gpt))
    assert not set(names) & set(transformer._LLAMA_PINNED)
    a, b = Net(2, Precision.BF16), Net(2, Precision.BF16)
    transformer.llama(a, layers=2, kv_heads=8)
    args = {**_defaults(transformer.llama), "layers": 2, "kv_heads": 8}
    transformer.gpt(b, **args, **transformer._LLAMA_PINNED)
    assert a.all_layers() == b.all_layers()
    assert get_model_info("llama2_7b").arguments()["hidden"] == 4096


def test_cifar_vgg_takes_vgg_arguments_with_cifar_defaults() -> None:
    assert list(_defaults(cnn.cifar_vgg)) == list(_defaults(cnn.vgg))
    assert _defaults(cnn.cifar_vgg) == {
        "depth": 19,
        "batch_norm": True,
        "image_size": 32,
        "num_classes": 10,
    }
    assert build_model("vgg19_bn_cifar", batch_size=1).total_params == 20_040_522


def test_zoo_entry_with_an_unknown_argument_fails_at_import() -> None:
    """A zoo row's keywords are its builder's arguments: a mistyped one (pinned or a default) is
    an error naming the entry, the builder and the keyword when the zoo is built, not a
    ``KeyError`` or an ignored value when the entry is first used."""
    with pytest.raises(ValueError, match=r"zoo entry x: gpt\(\) has no argument 'hiden'"):
        zoo._m("x", transformer.gpt, "transformer", "ref", hidden=1024, hiden=3)
    with pytest.raises(ValueError, match=r"zoo entry y: resnet\(\) has no argument 'layers'"):
        zoo._m("y", cnn.resnet, "cnn", "ref", _layers=50)
    with pytest.raises(ValueError, match=r"llama\(\) has no argument 'mlp'"):
        zoo._t("z", transformer.llama, "ref", mlp="swiglu")  # pinned by llama, not an argument
    info = zoo._t("w", transformer.llama, "ref", hidden=1024, kv_heads=8)
    assert list(info.defaults.items()) == [("hidden", 1024), ("kv_heads", 8)]


#: The zoo rows' defaults in their order at 59b9956 for the entries whose rows share values
#: (``**_GPT2``, ``**_LLAMA3``, ``**_QWEN3_ATTN``): ``build_model``'s recorded model arguments
#: keep this order.
_ROW_DEFAULTS = {
    "gpt2_medium": "hidden layers heads max_positions flash_attention",
    "llama3_8b": "hidden layers heads kv_heads ffn_hidden vocab seq_len",
    "qwen3_30b_a3b": "hidden layers heads kv_heads head_dim qk_norm ffn_hidden experts top_k "
    "expert_ffn_hidden vocab",
    "qwen3_8b": "hidden layers heads kv_heads head_dim qk_norm ffn_hidden vocab seq_len "
    "tied_embeddings",
}


@pytest.mark.parametrize("name", sorted(_ROW_DEFAULTS))
def test_zoo_row_defaults_keep_their_order(name: str) -> None:
    assert list(get_model_info(name).defaults) == _ROW_DEFAULTS[name].split()
    assert get_model_info("qwen3_8b").reference.endswith("untied head; 8,190,735,360)")
    assert get_model_info("qwen3_4b").reference.endswith("; tied head; 4,022,468,096)")


#: The signatures ``help()`` showed of the table-built builders at d7951d8, when each was
#: written out (net and return annotation left out).
_RECORDED_MOE = (
    "hidden: 'int' = 4096, layers: 'int' = 32, heads: 'int' = 32, "
    "kv_heads: 'int | None' = 8, head_dim: 'int | None' = None, qk_norm: 'bool' = False, "
    "ffn_hidden: 'int' = 14336, experts: 'int' = 8, top_k: 'int' = 2, "
    "expert_ffn_hidden: 'int | None' = None, shared_experts: 'int' = 0, "
    "moe_layer_freq: 'int' = 1, first_dense_layers: 'int' = 0, "
    "expert_bias: 'bool' = False, load_imbalance: 'float' = 1.0, "
    "capacity_factor: 'float' = 0.0, router_groups: 'int' = 0, "
    "router_group_topk: 'int' = 0, aux_loss: 'bool' = True, kv_lora_rank: 'int' = 0, "
    "q_lora_rank: 'int' = 0, qk_rope_head_dim: 'int' = 0, "
    "v_head_dim: 'int | None' = None, seq_len: 'int' = 4096, vocab: 'int' = 32000, "
    "tied_embeddings: 'bool' = False, flash_attention: 'bool' = True"
)
_RECORDED = {
    "frontier.deepseek_v3": "mtp_layers: 'int' = 0, " + _RECORDED_MOE,
    "frontier.gpt_oss": (
        "hidden: 'int' = 2880, layers: 'int' = 36, heads: 'int' = 64, kv_heads: 'int' = 8, "
        "head_dim: 'int' = 64, experts: 'int' = 128, top_k: 'int' = 4, "
        "expert_ffn_hidden: 'int' = 2880, sliding_window: 'int' = 128, "
        "seq_len: 'int' = 4096, vocab: 'int' = 201088, load_imbalance: 'float' = 1.0, "
        "capacity_factor: 'float' = 0.0, flash_attention: 'bool' = True"
    ),
    "frontier.grok1": (
        "hidden: 'int' = 6144, layers: 'int' = 64, heads: 'int' = 48, kv_heads: 'int' = 8, "
        "head_dim: 'int' = 128, experts: 'int' = 8, top_k: 'int' = 2, "
        "expert_ffn_hidden: 'int' = 32768, seq_len: 'int' = 8192, vocab: 'int' = 131072, "
        "load_imbalance: 'float' = 1.0, capacity_factor: 'float' = 0.0, "
        "flash_attention: 'bool' = True"
    ),
    "frontier.llama4": (
        "hidden: 'int' = 5120, layers: 'int' = 48, heads: 'int' = 40, kv_heads: 'int' = 8, "
        "head_dim: 'int' = 128, ffn_hidden: 'int' = 16384, experts: 'int' = 16, "
        "top_k: 'int' = 1, expert_ffn_hidden: 'int' = 8192, shared_experts: 'int' = 1, "
        "moe_layer_step: 'int' = 1, attention_chunk: 'int' = 8192, nope_every: 'int' = 4, "
        "qk_norm: 'bool' = True, seq_len: 'int' = 8192, vocab: 'int' = 202048, "
        "load_imbalance: 'float' = 1.0, capacity_factor: 'float' = 0.0, "
        "flash_attention: 'bool' = True"
    ),
    "moe.moe": _RECORDED_MOE,
    "transformer.llama": (
        "hidden: 'int' = 4096, layers: 'int' = 32, heads: 'int' = 32, "
        "kv_heads: 'int | None' = None, head_dim: 'int | None' = None, "
        "qk_norm: 'bool' = False, ffn_hidden: 'int' = 11008, seq_len: 'int' = 4096, "
        "vocab: 'int' = 32000, tied_embeddings: 'bool' = False, "
        "flash_attention: 'bool' = True, attn_bias: 'bool' = False"
    ),
    "cnn.cifar_vgg": (
        "depth: 'int' = 19, batch_norm: 'bool' = True, image_size: 'int' = 32, "
        "num_classes: 'int' = 10"
    ),
}


@pytest.mark.parametrize("name", sorted(_RECORDED))
def test_table_signature_annotations_as_written(name: str) -> None:
    """``help(builder)`` shows each model argument with the type a written signature gave it
    (``kv_heads: 'int | None' = 8``, not ``'int'``; ``head_dim: 'int | None' = None``, not
    ``'NoneType'``; llama's ``ffn_hidden: 'int' = 11008``)."""
    module, attr = name.split(".")
    fn = getattr(
        {"cnn": cnn, "frontier": frontier, "moe": moe, "transformer": transformer}[module], attr
    )
    params = inspect.signature(fn).parameters.values()
    assert ", ".join(str(p) for p in params if p.name != "net") == _RECORDED[name]
    assert f"{attr}(net: 'Net', *, {_RECORDED[name]})" in pydoc.render_doc(
        fn, renderer=pydoc.plaintext
    )


def test_table_signature_needs_the_type_of_a_none_default() -> None:
    def fn(net: object, **kwargs: object) -> None: ...

    with pytest.raises(ValueError, match="state the type of head_dim"):
        zoo._args.table_signature(fn, {"hidden": 8, "head_dim": None})
    zoo._args.table_signature(fn, {"hidden": 8, "head_dim": None}, {"head_dim": "int | None"})
    assert (
        str(inspect.signature(fn))
        == "(net: 'object', *, hidden: 'int' = 8, head_dim: 'int | None' = None) -> 'None'"
    )


_BUILDERS = [
    (frontier.gpt_oss, "gpt_oss"),
    (frontier.llama4, "llama4"),
    (frontier.grok1, "grok1"),
    (frontier.deepseek_v3, "moe"),  # the arguments it passes on to moe(), as at d7951d8
    (moe.moe, "moe"),
    (transformer.llama, "llama"),
    (cnn.cifar_vgg, "cifar_vgg"),
]


@pytest.mark.parametrize(("builder", "named"), _BUILDERS)
def test_unknown_argument_names_the_builder(builder: Callable[..., Any], named: str) -> None:
    """The Python API's error for a mistyped model argument names the builder, as a written
    signature's does (``gpt_oss() got an unexpected keyword argument 'hiden'``)."""
    with pytest.raises(TypeError) as err:
        builder(Net(1, Precision.BF16), hiden=3)
    assert str(err.value) == f"{named}() got an unexpected keyword argument 'hiden'"


def _is_constant(node: ast.expr, module: object) -> bool:
    """``node`` names a module constant (``MLA_ARGS``, ``_moe.MLA_ARGS``), not a local."""
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id in vars(module)


def _literal_keys(node: ast.AST, name: str, module: object) -> set[str]:
    """The string keys ``name["key"]`` reads and the strings of the tuples ``name[k] for k in
    (...)`` iterates (written out or a module constant such as ``MLA_ARGS``), anywhere in
    ``node``."""
    keys = set()
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == name
        ):
            if isinstance(sub.slice, ast.Constant):
                keys.add(sub.slice.value)
        if isinstance(sub, ast.comprehension) and isinstance(sub.iter, ast.Tuple):
            keys |= {e.value for e in sub.iter.elts if isinstance(e, ast.Constant)}
        elif isinstance(sub, ast.comprehension) and _is_constant(sub.iter, module):
            value = eval(ast.unparse(sub.iter), dict(vars(module)))  # a module constant
            if isinstance(value, tuple):
                keys |= set(value)
        if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Tuple):
            keys |= {e.value for e in sub.value.elts if isinstance(e, ast.Constant)}
    return keys


def _function(module: object, name: str) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


#: The functions that read model arguments ``a`` by name, and the builders whose arguments
#: they are (a builder's body reads its own, ``bound(builder, ...)``).
_READERS = [
    (frontier, "gpt_oss", [frontier.gpt_oss]),
    (frontier, "llama4", [frontier.llama4]),
    (frontier, "grok1", [frontier.grok1]),
    (frontier, "deepseek_v3", [moe.moe]),
    (frontier, "_routed", [frontier.gpt_oss, frontier.llama4, frontier.grok1]),
    (moe, "moe", [moe.moe]),
    (moe, "decoder_config", [moe.moe, frontier.gpt_oss, frontier.llama4, frontier.grok1]),
    (moe, "moe_config", [moe.moe]),
    (cnn, "cifar_vgg", [cnn.cifar_vgg]),
]


@pytest.mark.parametrize(("module", "name", "builders"), _READERS, ids=[r[1] for r in _READERS])
def test_argument_reads_name_arguments(module: object, name: str, builders: list[Any]) -> None:
    """Every key a table builder's body (or a helper it hands its arguments to) reads is an
    argument of the builders concerned: a mistyped ``a["sliding_windw"]`` fails here, not as a
    ``KeyError`` the first time that branch builds a model."""
    keys = _literal_keys(_function(module, name), "a", module)
    assert keys, f"{name} reads no argument by name: the test looks at the wrong place"
    for builder in builders:
        assert keys <= set(inspect.signature(builder).parameters) - {"net"}, builder.__name__
