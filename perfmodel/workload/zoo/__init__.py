"""The model zoo: ``build_model(name, batch_size=..., **model_args) -> Workload``.

Every entry names its reference implementation; parameter counts are tested exactly against it
(``tests/workload/test_zoo.py``). Model arguments arrive typed (Python, YAML) or as strings (the
CLI's ``--model-arg key=value``) and are converted to the builder's types here.

Kept whole (issue 29): :func:`build_model` (~125 lines, 40 of them docstring) is the one
place model arguments are coerced, checked and handed to a builder, in that order.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from perfmodel._memo import BoundedMemo
from perfmodel._schema import FLAG_WORDS
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError, InfeasiblePlanError, did_you_mean
from perfmodel.workload._net import WHOLE_RANK, Net, RankLayout
from perfmodel.workload.kernels import DEFAULT_KERNELS, KernelRecipe
from perfmodel.workload.layers import LayerCost, Workload, runs_isum
from perfmodel.workload.zoo import cnn, frontier, inception, mlp, moe, transformer


@dataclass(frozen=True)
class ModelInfo:
    """One zoo entry.

    Attributes
    ----------
    name
        CLI name (``resnet50``).
    builder
        Function ``builder(net, **kwargs)`` appending the layers.
    fixed
        Keyword arguments this entry pins (``depth=50``); not overridable.
    defaults
        Defaults of this entry that differ from the builder's (``hidden=1024`` for bert_large);
        overridable.
    family
        ``cnn``, ``transformer`` or ``mlp``.
    reference
        The implementation whose parameter count the zoo reproduces.
    """

    name: str
    builder: Callable[..., Any]
    family: str
    reference: str
    fixed: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def sample_unit(self) -> str:
        return (
            "images"
            if self.family == "cnn"
            else ("sequences" if self.family == "transformer" else "samples")
        )

    def arguments(self) -> dict[str, Any]:
        """Model arguments this entry accepts, with their defaults."""
        out: dict[str, Any] = {}
        for pname, p in _parameters(self.builder):
            if pname == "net" or pname in self.fixed:
                continue
            if pname == "depth":
                out["layers"] = self.defaults.get("depth", p.default)
                continue
            out[pname] = self.defaults.get(pname, p.default)
        return out

    def check_arguments(self, keys: Sequence[str], *, where: str = "") -> None:
        """Refuse the first of ``keys`` that is not one of :meth:`arguments`: the error names
        the model, the key, the closest accepted argument (:func:`difflib.get_close_matches`,
        as a model or system name is suggested) and every accepted one. ``where``
        (``"grid.toml: [axes] model_args.hiden: "``) is put before the message.

        Raises
        ------
        ConfigError
            ``value`` the key, ``where`` the key (or ``where`` when given).
        """
        accepted = self.arguments()
        for key in keys:
            if key in accepted:
                continue
            hint = did_you_mean(str(key), sorted(accepted))
            raise ConfigError(
                f"{where}model {self.name} has no argument {key!r}{hint}; it accepts "
                f"{', '.join(sorted(accepted)) or 'none'}",
                value=key,
                where=where.rstrip(": ") or key,
            )


@lru_cache(maxsize=128)
def _parameters(builder: Callable[..., Any]) -> tuple[tuple[str, inspect.Parameter], ...]:
    """``inspect.signature(builder).parameters`` as pairs, once per builder function (~0.2 ms
    each, twice per workload build: issue 14, nothing rebuilt per plan that does not depend on
    the plan); bounded (the zoo has ~50 builders)."""
    return tuple(inspect.signature(builder).parameters.items())


def _m(name: str, builder: Callable[..., Any], family: str, reference: str, **kw: Any) -> ModelInfo:
    """Zoo entry ``name`` of ``builder``: keywords ``_key=value`` pin argument ``key``, the others
    change its default (in the order given).

    Raises
    ------
    ValueError
        At import, for a keyword that is not an argument of ``builder`` (a mistyped row).
    """
    fixed = {k[1:]: v for k, v in kw.items() if k.startswith("_")}
    defaults = {k: v for k, v in kw.items() if not k.startswith("_")}
    known = {p for p, _ in _parameters(builder)} - {"net"}
    for key in (*fixed, *defaults):
        if key not in known:
            raise ValueError(  # internal invariant: the zoo's own table
                f"zoo entry {name}: {builder.__name__}() has no argument {key!r}; it takes "
                f"{', '.join(sorted(known))}"
            )
    return ModelInfo(
        name, builder, family, reference, MappingProxyType(fixed), MappingProxyType(defaults)
    )


def _t(name: str, builder: Callable[..., Any], reference: str, **kw: Any) -> ModelInfo:
    """A transformer entry (:func:`_m`)."""
    return _m(name, builder, "transformer", reference, **kw)


_TV = "torchvision.models"
_KERAS = "tf.keras.applications"
_META = "config.json of huggingface.co/meta-llama/"
_QWEN = "config.json of huggingface.co/Qwen/"
_L2 = "(RMSNorm, rope theta 1e4, SwiGLU, untied)"
_L3 = "(RMSNorm, rope theta 5e5, SwiGLU, untied)"
#: GPT-2's 1024 learned positions and eager attention (HF ``GPT2Model``).
_GPT2 = {"max_positions": 1024, "flash_attention": False}
#: Llama 3's vocabulary and context (``vocab_size``, the 8192 positions it was trained on).
_LLAMA3 = {"vocab": 128256, "seq_len": 8192}
#: Qwen3's attention heads: 128 wide, with a query/key RMSNorm.
_QWEN3_ATTN = {"head_dim": 128, "qk_norm": True}
_QWEN3_VOCAB = 151936


def _qwen3_dense(
    name: str,
    hf: str,
    count: str,
    *,
    hidden: int,
    layers: int,
    heads: int,
    ffn_hidden: int,
    tied_embeddings: bool,
) -> ModelInfo:
    """A dense Qwen3 entry: ``llama`` with 8 KV heads, Qwen3's heads (:data:`_QWEN3_ATTN`) and
    vocabulary, 4096-token samples, and the keyword arguments (in the order of its arguments);
    ``hf`` its HuggingFace name, ``count`` its parameters."""
    head = "tied" if tied_embeddings else "untied"
    reference = (
        f"{_QWEN}{hf} (qk-norm, RMSNorm, SwiGLU, GQA 8 KV heads of 128; {head} head; {count})"
    )
    args = {
        "hidden": hidden, "layers": layers, "heads": heads, "kv_heads": 8, **_QWEN3_ATTN,
        "ffn_hidden": ffn_hidden, "vocab": _QWEN3_VOCAB, "seq_len": 4096,
        "tied_embeddings": tied_embeddings,
    }  # fmt: skip
    return _t(name, transformer.llama, reference, **args)


#: Qwen3-0.6B/1.7B tie the head to the embedding; their safetensors also store the head
#: (751,632,384 and 2,031,739,904 counted from the files), the model cards count it once.
_QWEN_SMALL = (
    "596,049,920 trained, 440,467,456 without the embedding: the card's 0.6B / 0.44B",
    "1,720,574,976 trained, 1,409,410,048 without the embedding: the card's 1.7B / 1.4B",
)
#: DeepSeek-V3's shape (``config.json`` of huggingface.co/deepseek-ai/DeepSeek-V3), the
#: defaults of its zoo entry.
_DEEPSEEK_V3 = {
    "hidden": 7168, "layers": 61, "heads": 128, "head_dim": 128, "ffn_hidden": 18432,
    "experts": 256, "top_k": 8, "expert_ffn_hidden": 2048, "shared_experts": 1,
    "first_dense_layers": 3, "expert_bias": True, "router_groups": 8, "router_group_topk": 4,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab": 129280,
}  # fmt: skip
# fmt: off
_MODELS: dict[str, ModelInfo] = {}
for _info in [
    _m("lenet5", cnn.lenet5, "cnn", "LeCun et al. 1998 (61,706 parameters)"),
    _m("alexnet", cnn.alexnet, "cnn", f"{_TV}.alexnet (61,100,840)"),
    *[
        _m(
            f"vgg{d}{'_bn' if bn else ''}{suffix}",
            builder,
            "cnn",
            f"{src}vgg{d}{'_bn' if bn else ''}",
            _depth=d,
            _batch_norm=bn,
        )
        for suffix, builder, src in (
            ("", cnn.vgg, f"{_TV}."),
            ("_cifar", cnn.cifar_vgg, "bearpaw/pytorch-classification models/cifar/vgg.py "),
        )
        for d in (11, 13, 16, 19)
        for bn in (False, True)
    ],
    *[
        _m(f"resnet{d}", cnn.resnet, "cnn", f"{_TV}.resnet{d}", _depth=d)
        for d in (18, 34, 50, 101, 152)
    ],
    *[
        _m(f"resnet{d}v2", cnn.resnet_v2, "cnn", f"{_KERAS}.ResNet{d}V2", _depth=d)
        for d in (50, 101, 152)
    ],
    _m("resnet", cnn.resnet, "cnn", f"{_TV}.resnet (layers = 18/34/50/101/152)", depth=50),
    *[
        _m(
            f"resnet{d}",
            cnn.cifar_resnet,
            "cnn",
            "He et al. 2016 sec. 4.2 (CIFAR, option A)",
            _depth=d,
        )
        for d in (20, 32, 44, 56, 110)
    ],
    _m(
        "cifar_resnet", cnn.cifar_resnet, "cnn", "He et al. 2016 sec. 4.2 (layers = 6n+2)", depth=32
    ),
    _m("mobilenet_v2", cnn.mobilenet_v2, "cnn", f"{_TV}.mobilenet_v2 (3,504,872)"),
    _t("vit_b_16", transformer.vit, f"{_TV}.vit_b_16 (86,567,656)"),
    _t("vit_l_16", transformer.vit, f"{_TV}.vit_l_16",
       hidden=1024, layers=24, heads=16, ffn_hidden=4096),
    _t("vit_h_14", transformer.vit, f"{_TV}.vit_h_14",
       patch=14, hidden=1280, layers=32, heads=16, ffn_hidden=5120),
    _t("vit", transformer.vit, "ViT (Dosovitskiy et al. 2021), torchvision layout"),
    _t("bert_base", transformer.bert, "transformers.BertModel bert-base-uncased",
       hidden=768, layers=12, heads=12, seq_len=128),
    _t("bert_large", transformer.bert, "transformers.BertModel bert-large-uncased", seq_len=128),
    _t("bert", transformer.bert, "BERT (Devlin et al. 2019), HuggingFace layout", seq_len=128),
    _t("gpt2", transformer.gpt, "transformers.GPT2Model gpt2 (124,439,808)", **_GPT2),
    _t("gpt2_medium", transformer.gpt, "transformers gpt2-medium",
       hidden=1024, layers=24, heads=16, **_GPT2),
    _t("gpt2_large", transformer.gpt, "transformers gpt2-large",
       hidden=1280, layers=36, heads=20, **_GPT2),
    _t("gpt2_xl", transformer.gpt, "transformers gpt2-xl",
       hidden=1600, layers=48, heads=25, **_GPT2),
    _t("gpt", transformer.gpt, "Megatron-LM GPT layout (Narayanan et al. 2021)"),
    _t("llama", transformer.llama, "Llama family; defaults are Llama-2-7B"),
    _t("llama2_7b", transformer.llama, f"{_META}Llama-2-7b-hf {_L2} (6,738,415,616)"),
    _t("llama2_13b", transformer.llama, f"{_META}Llama-2-13b-hf {_L2} (13,015,864,320)",
       hidden=5120, layers=40, heads=40, ffn_hidden=13824),
    _t("llama2_70b", transformer.llama,
       f"{_META}Llama-2-70b-hf {_L2}, GQA 8 KV heads (68,976,648,192)",
       hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672),
    _t("llama3_8b", transformer.llama, f"{_META}Meta-Llama-3-8B {_L3} (8,030,261,248)",
       hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336, **_LLAMA3),
    _t("llama3_70b", transformer.llama, f"{_META}Meta-Llama-3-70B {_L3} (70,553,706,496)",
       hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672, **_LLAMA3),
    _t("llama3_405b", transformer.llama, f"{_META}Llama-3.1-405B {_L3} (405,853,388,800)",
       hidden=16384, layers=126, heads=128, kv_heads=8, ffn_hidden=53248, **_LLAMA3),
    _t("moe", moe.moe, "mixture-of-experts decoder; defaults are Mixtral 8x7B"),
    _t("mixtral_8x7b", moe.moe,
       "config.json of huggingface.co/mistralai/Mixtral-8x7B-v0.1 (46,702,792,704; "
       "12,879,925,248 active)"),
    _t("mixtral_8x22b", moe.moe,
       "config.json of huggingface.co/mistralai/Mixtral-8x22B-v0.1 (140,630,071,296; "
       "39,161,468,928 active)",
       hidden=6144, layers=56, heads=48, ffn_hidden=16384, vocab=32768),
    _t(
        "deepseek_v3",
        frontier.deepseek_v3,
        "config.json of huggingface.co/deepseek-ai/DeepSeek-V3, main model (671,026,404,352 + "
        "14,848 expert-bias buffers; 37,552,282,624 active); node-limited routing n_group=8, "
        "topk_group=4; mtp_layers=1 adds the multi-token-prediction module "
        "(num_nextn_predict_layers, 682,636,472,320 trained; 38,240,382,976 active)",
        **_DEEPSEEK_V3,
    ),
    _t("qwen3_30b_a3b", moe.moe,
       f"{_QWEN}Qwen3-30B-A3B (qk-norm, no shared experts; 30,532,122,624; "
       "3,353,032,704 active)",
       hidden=2048, layers=48, heads=32, kv_heads=4, **_QWEN3_ATTN, ffn_hidden=6144,
       experts=128, top_k=8, expert_ffn_hidden=768, vocab=_QWEN3_VOCAB),
    _t("qwen3_235b_a22b", moe.moe,
       f"{_QWEN}Qwen3-235B-A22B (qk-norm, no shared experts; 235,093,634,560; "
       "22,190,763,520 active)",
       hidden=4096, layers=94, heads=64, kv_heads=4, **_QWEN3_ATTN, ffn_hidden=12288,
       experts=128, top_k=8, expert_ffn_hidden=1536, vocab=_QWEN3_VOCAB),
    _qwen3_dense("qwen3_0_6b", "Qwen3-0.6B", _QWEN_SMALL[0], hidden=1024, layers=28, heads=16, ffn_hidden=3072, tied_embeddings=True),
    _qwen3_dense("qwen3_1_7b", "Qwen3-1.7B", _QWEN_SMALL[1], hidden=2048, layers=28, heads=16, ffn_hidden=6144, tied_embeddings=True),
    _qwen3_dense("qwen3_4b", "Qwen3-4B", "4,022,468,096", hidden=2560, layers=36, heads=32, ffn_hidden=9728, tied_embeddings=True),
    _qwen3_dense("qwen3_8b", "Qwen3-8B", "8,190,735,360", hidden=4096, layers=36, heads=32, ffn_hidden=12288, tied_embeddings=False),
    _qwen3_dense("qwen3_14b", "Qwen3-14B", "14,768,307,200", hidden=5120, layers=40, heads=40, ffn_hidden=17408, tied_embeddings=False),
    _qwen3_dense("qwen3_32b", "Qwen3-32B", "32,762,123,264", hidden=5120, layers=64, heads=64, ffn_hidden=25600, tied_embeddings=False),
    _t("gpt_oss_120b", frontier.gpt_oss,
       "config.json of huggingface.co/openai/gpt-oss-120b (36 layers, 128 experts top-4, "
       "biased attention with sinks, sliding window 128 on even layers; 116,829,156,672; "
       "5,711,982,912 active with the embedding)"),
    _t("gpt_oss_20b", frontier.gpt_oss,
       "config.json of huggingface.co/openai/gpt-oss-20b (24 layers, 32 experts top-4; "
       "20,914,757,184; 4,187,440,704 active with the embedding)",
       layers=24, experts=32),
    _t("llama4_scout", frontier.llama4,
       "text_config of config.json of huggingface.co/meta-llama/Llama-4-Scout-17B-16E (16 "
       "experts top-1 + 1 shared in every layer, chunked attention 8192, L2 qk-norm; "
       "107,769,861,120; 17,172,894,720 active; no vision encoder)"),
    _t("llama4_maverick", frontier.llama4,
       "text_config of config.json of huggingface.co/meta-llama/Llama-4-Maverick-17B-128E "
       "(128 experts top-1 + 1 shared in every second layer, dense 16384 between; "
       "400,711,848,960; 17,184,691,200 active; no vision encoder)",
       experts=128, moe_layer_step=2, qk_norm=False),
    _t(
        "grok_1",
        frontier.grok1,
        "github.com/xai-org/grok-1 @7050ed2 run.py / model.py (8 experts top-2, four RMSNorms "
        "per layer, tied embedding; 315,684,820,992; 83,756,587,008 active)",
    ),
    _t(
        "transformer_xl",
        transformer.transformer_xl,
        "Transformer-XL base, DeepLearningExamples wt103_base.yaml (Dai et al. 2019)",
    ),
    _m("mlp", mlp.mlp, "mlp", "plain MLP: widths = input, hidden..., output"),
]:
    _MODELS[_info.name] = _info
# fmt: on

_MODELS["inception_v3"] = _m(
    "inception_v3", inception.inception_v3, "cnn", f"{_TV}.inception_v3 (27,161,264 with aux)"
)


#: Other spellings of zoo names (after :func:`_key`): Meta's and HuggingFace's names (``Llama-2-7b``,
#: ``Llama-3.1-405B``). Llama 3.1 8B/70B have the shapes of Llama 3 8B/70B (only rope scaling
#: and the position limit differ, neither has parameters).
_ALIASES: dict[str, str] = {
    **{f"llama_2_{n}": f"llama2_{n}" for n in ("7b", "13b", "70b")},
    **{f"llama_3_{n}": f"llama3_{n}" for n in ("8b", "70b", "405b")},
    **{f"llama3_1_{n}": f"llama3_{n}" for n in ("8b", "70b", "405b")},
    **{f"llama_3_1_{n}": f"llama3_{n}" for n in ("8b", "70b", "405b")},
    "llama_4_scout": "llama4_scout",
    "llama_4_scout_17b_16e": "llama4_scout",
    "llama_4_maverick": "llama4_maverick",
    "llama_4_maverick_17b_128e": "llama4_maverick",
    "grok1": "grok_1",
    "gptoss_120b": "gpt_oss_120b",
    "gptoss_20b": "gpt_oss_20b",
}


def _key(name: object) -> str:
    """Lookup key of a model name: lower case, ``-`` and ``.`` read as ``_``."""
    return str(name).lower().replace("-", "_").replace(".", "_")


def model_aliases(name: str) -> list[str]:
    """Other names :func:`get_model_info` accepts for zoo entry ``name`` (sorted)."""
    return sorted(a for a, target in _ALIASES.items() if target == name)


def list_models() -> list[ModelInfo]:
    """All zoo entries, sorted by name."""
    return [_MODELS[k] for k in sorted(_MODELS)]


def get_model_info(name: str) -> ModelInfo:
    """Zoo entry by name or alias (case-insensitive, ``-`` and ``.`` read as ``_``:
    ``Llama-2-7b``, ``llama3.1-405b``).

    Raises
    ------
    ConfigError
        For an unknown name, with the closest known names and aliases.
    """
    key = _key(name)
    key = _ALIASES.get(key, key)
    if key in _MODELS:
        return _MODELS[key]
    close = difflib.get_close_matches(key, [*_MODELS, *_ALIASES], n=3, cutoff=0.5)
    named = [c if c in _MODELS else f"{c} (= {_ALIASES[c]})" for c in close]
    hint = f"; did you mean {', '.join(named)}?" if named else ""
    raise ConfigError(
        f"unknown model {name!r}{hint} (see `perfmodel model list`)", value=name, where="model"
    )


def _coerce(value: Any, default: Any, key: str) -> Any:
    """Convert a CLI string (or YAML value) to the type of the builder's default."""
    if isinstance(value, str):
        text = value.strip()
        if isinstance(default, bool) or text.lower() in ("true", "false"):
            if text.lower() in FLAG_WORDS:
                return FLAG_WORDS[text.lower()]
            raise ConfigError(f"model arg {key}={value!r} is not a boolean", value=value, where=key)
        if "," in text and isinstance(default, int) and not isinstance(default, bool):
            raise ConfigError(
                f"model arg {key}={text!r}: expected an integer, not a list",
                value=value,
                where=key,
            )
        if key == "widths" or "," in text:
            try:
                return [int(v) for v in text.replace("x", ",").split(",") if v.strip()]
            except ValueError as exc:
                raise ConfigError(
                    f"model arg {key}={value!r}: expected comma-separated integers",
                    value=value,
                    where=key,
                ) from exc
        if isinstance(default, str):
            return text
        try:
            return int(text)
        except ValueError as exc:
            if default is None or isinstance(default, int):
                raise ConfigError(
                    f"model arg {key}={value!r} is not an integer", value=value, where=key
                ) from exc
            return text
    if isinstance(value, bool) and isinstance(default, int) and not isinstance(default, bool):
        raise ConfigError(
            f"model arg {key}={value!r} is a boolean; expected an integer", value=value, where=key
        )
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (list, tuple)):
        if isinstance(default, int | str) and not isinstance(default, bool):
            kind = "an integer" if isinstance(default, int) else "one value"
            raise ConfigError(
                f"model arg {key}={','.join(map(str, value))}: expected {kind}, not a list",
                value=value,
                where=key,
            )
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigError(
                f"model arg {key}={value!r}: expected a list of integers", value=value, where=key
            )
        return list(value)
    return value


#: Integer model arguments for which 0 is meaningful (Transformer-XL without a memory).
_ZERO_OK = frozenset({"mem_len"})


def _check_count(key: str, value: Any, default: Any) -> None:
    """An integer argument whose default is a positive count (``num_classes``, ``hidden``,
    ``layers`` ...) must be a count too: >= 1 (>= 0 for :data:`_ZERO_OK`)."""
    if not (isinstance(default, int) and not isinstance(default, bool) and default > 0):
        return
    if isinstance(value, int) and not isinstance(value, bool):
        low = 0 if key in _ZERO_OK else 1
        if value < low:
            raise ConfigError(
                f"model arg {key}={value} must be an integer >= {low}", value=value, where=key
            )


def build_model(
    name: str,
    *,
    batch_size: int,
    precision: Precision | str = "fp32",
    tp: int = 1,
    sequence_parallel: bool = False,
    ep: int = 1,
    cp: int = 1,
    etp: int = 0,
    kernels: KernelRecipe = DEFAULT_KERNELS,
    **model_args: Any,
) -> Workload:
    """Build the per-rank layer list of zoo model ``name`` for one micro-batch.

    Parameters
    ----------
    name
        Zoo name (``perfmodel model list``).
    batch_size
        Micro-batch size in samples on one rank (must be >= 1).
    precision
        Training precision (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8``).
    tp
        Tensor-parallel degree: Megatron sharding for transformers, fully connected layers only
        for CNNs (Krizhevsky 2014).
    sequence_parallel
        Megatron sequence parallelism (transformers, ``tp > 1``).
    ep, cp, etp
        Expert, context and expert tensor parallelism (:class:`perfmodel.workload._net.RankLayout`);
        ``ep > 1`` needs a mixture-of-experts model, ``cp > 1`` a decoder that splits its
        sequence (``Net.local_seq``).
    kernels
        The training stack's kernels (:class:`~perfmodel.workload.kernels.KernelRecipe`:
        fusion mode, FP8 recipe, FSDP2 copies); default PyTorch eager, no FP8 casts, no FSDP.
    **model_args
        ``image_size``, ``num_classes``, ``hidden``, ``layers``, ``heads``, ``kv_heads``,
        ``ffn_hidden``, ``seq_len``, ``vocab``, ``widths``, ``flash_attention``, ... as the entry
        accepts (``ModelInfo.arguments()``).

    Raises
    ------
    ConfigError
        Unknown model or argument, non-positive batch, shapes that do not divide (naming the
        argument), an image too small for the network.

    Examples
    --------
    >>> w = build_model("mlp", batch_size=32, widths=[784, 100, 10])
    >>> w.total_params  # 784*100 + 100 + 100*10 + 10
    79510
    """
    info = get_model_info(name)
    prec = Precision.parse(precision, where="precision")
    try:
        batch = int(batch_size)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"batch_size must be an integer, got {batch_size!r}",
            value=batch_size,
            where="batch_size",
        ) from exc
    if batch < 1 or batch != batch_size:
        raise ConfigError(
            f"batch_size must be a positive integer, got {batch_size!r}",
            value=batch_size,
            where="batch_size",
        )
    if int(tp) < 1:
        raise ConfigError(f"tp must be >= 1, got {tp}", value=tp, where="tp")
    accepted = info.arguments()
    kwargs: dict[str, Any] = {k: v for k, v in info.defaults.items() if k != "depth"}
    if "depth" in info.defaults:
        kwargs["depth"] = info.defaults["depth"]
    if not accepted.keys() >= model_args.keys():
        info.check_arguments(list(model_args))
    for key, value in model_args.items():
        v = _coerce(value, accepted[key], key)
        _check_count(key, v, accepted[key])
        kwargs["depth" if key == "layers" and "layers" not in _params(info) else key] = v
    kwargs.update(info.fixed)
    _check_depth(info, kwargs)
    layout = RankLayout(int(tp), bool(sequence_parallel), int(ep), int(cp), int(etp))
    if batch == 1 and layout == WHOLE_RANK and kernels == DEFAULT_KERNELS:
        net, cfg = _whole_build(info, kwargs, prec)  # the whole model at micro-batch 1
    else:
        net = Net(batch, prec, layout, kernels=kernels)
        cfg = info.builder(net, **kwargs)
    _check_expert_context(info.name, net)
    layers = net.all_layers()
    split = tp > 1 or ep > 1 or cp > 1
    if split:
        total, active = _whole_counts(info, kwargs, prec)
    else:
        total, active = _counts(layers)
    seq = getattr(cfg, "seq_len", 1) if info.family == "transformer" else 1
    record = {k: v for k, v in kwargs.items() if k not in info.fixed}
    return Workload(
        name=info.name,
        layers=layers,
        batch_size=batch,
        precision=prec,
        total_params=total,
        sample_unit=info.sample_unit,
        tokens_per_sample=int(seq),
        tp=int(tp),
        sequence_parallel=bool(sequence_parallel) and tp > 1,
        model_args=record,
        buffers=net.buffers,
        total_active_params=active if active != total else None,
    )


def check_expert_degree(name: str, ep: int, has_experts: bool, *, where: str = "ep") -> None:
    """Refuse an expert-parallel degree ``ep > 1`` for a model without routed experts: the
    one check of ``predict --plan ep=N`` (the zoo's build, :func:`_check_expert_context`) and
    ``compare --ep N`` (the plan search, :func:`perfmodel.search.compare.search_plans`), which
    ignored it on a dense model (audit15 item 10).

    Raises
    ------
    InfeasiblePlanError
        ``ep > 1`` and no routed experts, naming ``ep``, the model and ``where``.
    """
    if ep > 1 and not has_experts:
        raise InfeasiblePlanError(
            f"ep={ep}: model {name} has no routed experts (use ep=1 or a MoE model)",
            value=ep,
            where=where,
        )


def _check_expert_context(name: str, net: Net) -> None:
    """``ep > 1`` needs routed experts and ``cp > 1`` a model that split its sequence."""
    check_expert_degree(name, net.ep, any(la.expert_role is not None for la in net.layers))
    if net.cp > 1 and not any(la.fwd_comm and la.fwd_comm[0].group == "cp" for la in net.layers):
        raise InfeasiblePlanError(
            f"cp={net.cp}: context parallelism is modelled for decoders with fused attention "
            f"(gpt, llama, moe families); model {name} does not support it",
            value=net.cp,
            where="cp",
        )


def _params(info: ModelInfo) -> set[str]:
    return {name for name, _ in _parameters(info.builder)}


def _check_depth(info: ModelInfo, kwargs: dict[str, Any]) -> None:
    depth = kwargs.get("depth")
    if depth is None:
        return
    valid = {
        cnn.resnet: cnn._RESNET_BLOCKS,
        cnn.vgg: cnn._VGG_CFG,
        cnn.cifar_vgg: cnn._VGG_CFG,
        cnn.resnet_v2: cnn._RESNET_V2_DEPTHS,
    }.get(info.builder)
    if valid is not None and depth not in valid:
        raise ConfigError(
            f"model {info.name}: layers={depth} not available; choose one of {sorted(valid)}",
            value=depth,
            where="layers",
        )


#: :func:`_whole_build` by (name, sorted arguments, precision).
_WHOLE_BUILDS: BoundedMemo[tuple[Any, ...], tuple[Net, Any]] = BoundedMemo(16)


def _whole_build(info: ModelInfo, kwargs: dict[str, Any], prec: Precision) -> tuple[Net, Any]:
    """``(network, builder's return)`` of the unsharded model at micro-batch 1 (:data:`~perfmodel.workload._net.WHOLE_RANK`),
    memoised where the arguments are hashable: the whole-model parameter counts of every
    sharded workload and a workload of those settings are the same build (issue 14: the 1-GPU
    speedup baseline of a model-parallel plan at one sample per GPU rebuilt the whole GPT-3
    that the run's parameter count had just built, ~3 ms). The network is not changed after
    its builder returns (:func:`build_model` copies its layers into a tuple)."""

    def build() -> tuple[Net, Any]:
        net = Net(1, prec)
        return net, info.builder(net, **kwargs)

    return _WHOLE_BUILDS.get(_whole_key(info, kwargs, prec), build)


def _whole_model(info: ModelInfo, kwargs: dict[str, Any], prec: Precision) -> Sequence[LayerCost]:
    """The layers of the unsharded model (``tp = 1``), for whole-model parameter counts."""
    return _whole_build(info, kwargs, prec)[0].all_layers()


def _counts(layers: Sequence[LayerCost]) -> tuple[int, int]:
    """``(parameters, active parameters)`` of ``layers`` (a stack's block counted once and
    multiplied, :func:`~perfmodel.workload.layers.runs_isum`: integers, exact)."""
    return runs_isum(layers, attrgetter("params")), runs_isum(layers, attrgetter("active_params"))


#: ``(parameters, active parameters)`` of unsharded models by (name, arguments, precision):
#: they depend on nothing else (not the batch, not the parallelism), and every sharded
#: workload of a plan search asks for them (issue 14: nothing rebuilt per plan that does not
#: depend on the plan). Bounded; a clear only costs a rebuild.
_WHOLE_COUNTS: BoundedMemo[tuple[Any, ...], tuple[int, int]] = BoundedMemo(256)


def _whole_key(info: ModelInfo, kwargs: dict[str, Any], prec: Precision) -> tuple[Any, ...]:
    """Memo key of a whole-model build: (name, sorted arguments, precision); not hashable
    where an argument is not (a list: CNN widths), and then not kept (:class:`BoundedMemo`)."""
    return (info.name, tuple(sorted(kwargs.items())), prec)


def _whole_counts(info: ModelInfo, kwargs: dict[str, Any], prec: Precision) -> tuple[int, int]:
    """:func:`_counts` of :func:`_whole_model`, memoised where the arguments are hashable."""
    return _WHOLE_COUNTS.get(
        _whole_key(info, kwargs, prec), lambda: _counts(_whole_model(info, kwargs, prec))
    )


__all__ = ["ModelInfo", "build_model", "get_model_info", "list_models", "model_aliases"]
