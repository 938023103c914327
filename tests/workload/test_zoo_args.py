"""Zoo builders whose keyword arguments come from a table (``workload/zoo/_args.py``, issue 29):
the signature the zoo reads is the table, a call checks its arguments as a written signature
would, and a variant builder is its base builder with pinned settings."""

from __future__ import annotations

import inspect

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload import build_model, get_model_info
from perfmodel.workload._net import Net
from perfmodel.workload.zoo import _transformers, cnn, frontier, moe, transformer


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


def test_zoo_family_rows() -> None:
    """A row's values fill the keys not shared, in order; ``None`` or a short row leaves the
    builder's default; a row longer than its keys is an error."""
    a, b = _transformers(
        transformer.gpt,
        "hidden layers heads max_positions",
        (("a", "ref a"), ("b", "ref b", 1024, None, 16)),
        max_positions=1024,
    )
    assert dict(a.defaults) == {"max_positions": 1024}
    assert dict(b.defaults) == {"hidden": 1024, "heads": 16, "max_positions": 1024}
    assert list(b.defaults) == ["hidden", "heads", "max_positions"]
    with pytest.raises(ValueError, match="more values"):
        _transformers(transformer.gpt, "hidden", (("c", "ref c", 1, 2),))


@pytest.mark.parametrize("model", sorted(frontier._SHAPES))
def test_frontier_defaults_keep_every_argument(model: str) -> None:
    """Every argument of a frontier builder's table rows is listed (``_ARG_ORDER`` drops none)."""
    given = {*frontier._SHAPE_ARGS, *frontier._OWN_ARGS[model], *frontier._ROUTING_ARGS}
    assert set(frontier._defaults(model)) == given
