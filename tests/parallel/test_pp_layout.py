"""A stated pipeline layout (Megatron-Core ``pipeline_model_parallel_layout``): the string's
grammar, the chunks it gives a model (hand-counted blocks per stage), its refusals, and its way
through a scenario and the ``predict`` command."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache

import pytest

from perfmodel.api import predict
from perfmodel.cli import main
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.parallel.partition import stated_partition
from perfmodel.parallel.pp_layout import parse_pipeline_layout
from perfmodel.scenario import Scenario
from perfmodel.scenario_parse import parse_scenario
from perfmodel.workload.layers import Workload
from perfmodel.workload.zoo import build_model

#: The DeepSeek-V3 layout of Megatron-Bridge's recipe at (pp, vp) = (4, 4)
#: (NVIDIA-NeMo/Megatron-Bridge @21d102f5 src/megatron/bridge/recipes/deepseek/deepseek_v3.py).
DSV3_4X4 = "Et*4|(t*4|)*14tmL"


@cache
def _dsv3() -> Workload:
    return build_model("deepseek_v3", batch_size=1, seq_len=4096, mtp_layers=1)


def _blocks(wl: Workload, ids: list[int]) -> list[str]:
    """The decoder blocks (``layer<N>``), MTP depths (``mtp<k>``) and ends of ``ids``, in order
    and once each."""
    out: list[str] = []
    for i in ids:
        name = wl.layers[i].name
        m = re.match(r"(layer\d+|mtp\d+)\.", name)
        key = m.group(1) if m else name
        if not out or out[-1] != key:
            out.append(key)
    return out


def test_layout_string_unrolls_as_megatron_core() -> None:
    """Megatron-Core's docstring example and the DeepSeek-V3 recipe's string, by hand."""
    lay = parse_pipeline_layout("Ettt|(tt|)*29,m|L")
    assert lay.stages == ("Ettt", *["tt"] * 29, "m", "L")
    lay = parse_pipeline_layout(DSV3_4X4)
    assert lay.stages == ("Etttt", *["tttt"] * 14, "tmL")
    assert sum(lay.counts("t")) == 61 and lay.counts("m")[-1] == 1


def test_dsv3_recipe_layout_stage_blocks() -> None:
    """pp 4 x vp 4 = 16 chunks; chunk s on stage s % 4: stage 0 holds the embedding and blocks
    0-3, 16-19, 32-35, 48-51 (16 blocks); stage 3 holds 12-15, 28-31, 44-47 and 60, the head
    and the MTP depth (13 blocks)."""
    wl = _dsv3()
    chunks = stated_partition(wl, 16, parse_pipeline_layout(DSV3_4X4))
    assert _blocks(wl, chunks[0]) == ["embed.tokens", "layer0", "layer1", "layer2", "layer3"]
    assert _blocks(wl, chunks[1]) == ["layer4", "layer5", "layer6", "layer7"]
    assert _blocks(wl, chunks[15]) == ["layer60", "final_norm", "lm_head", "loss", "mtp0"]
    stage = [[b for k in range(s, 16, 4) for b in _blocks(wl, chunks[k])] for s in range(4)]
    per_stage = [sum(b.startswith("layer") for b in blocks) for blocks in stage]
    assert per_stage == [16, 16, 16, 13]
    assert sorted(i for c in chunks for i in c) == list(range(len(wl.layers)))


def test_mtp_and_loss_in_chunks_of_their_own() -> None:
    """Megatron-Core's PP 16 x VP 2 example: the MTP depth and the loss each a chunk."""
    wl = _dsv3()
    chunks = stated_partition(wl, 32, parse_pipeline_layout("Et*3|(tt|)*29,m|L"))
    assert _blocks(wl, chunks[30]) == ["mtp0"]
    assert _blocks(wl, chunks[31]) == ["final_norm", "lm_head", "loss"]
    assert _blocks(wl, chunks[29]) == ["layer59", "layer60"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Et*4|x|tL", "unknown layer characters"),
        ("Et*4|(t*4|*14tmL", "unknown layer characters"),
        ("Et||tL", "holds no layer"),
        ("tEt|tL", "embedding 'E' must be the first"),
        ("Et|tLt", "loss 'L' must be the last"),
        ("Et|mtL", "before the MTP"),
        ("", "empty layout"),
        ("Et*99999|L", "exceeds"),
    ],
)
def test_bad_strings_are_refused_naming_the_value(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)) as e:
        parse_pipeline_layout(text, where="scenario.pipeline_layout")
    assert f"scenario.pipeline_layout={text!r}" in str(e.value)


@pytest.mark.parametrize(
    ("text", "k", "why"),
    [
        (DSV3_4X4, 8, "states 16 chunks but the plan runs 8"),
        ("Et*4|(t*4|)*14ttmL", 16, "places 62 decoder layers 't' and 1 MTP depths 'm'"),
        ("Et*4|(t*4|)*14tL", 16, "model deepseek_v3 has 61 and 1"),
    ],
)
def test_layouts_that_do_not_fit_the_model_are_refused(text: str, k: int, why: str) -> None:
    with pytest.raises(InfeasiblePlanError, match=re.escape(why)):
        stated_partition(_dsv3(), k, parse_pipeline_layout(text))


def test_scenario_key_parsed_once_and_left_out_of_the_hash_when_unset() -> None:
    sc = Scenario(system="dgx-a100", model="gpt2", batch_per_gpu=4, pp=2)
    assert "pipeline_layout" not in sc.to_dict()
    stated = replace(sc, pipeline_layout="Et*6|t*6L")
    assert stated.to_dict()["pipeline_layout"] == "Et*6|t*6L"
    assert Scenario.from_dict(stated.to_dict()) == stated
    assert parse_scenario(stated).pipeline_layout == parse_pipeline_layout("Et*6|t*6L")
    with pytest.raises(ConfigError, match=re.escape("scenario.pipeline_layout='Et*6|q'")):
        parse_scenario(replace(stated, pipeline_layout="Et*6|q"))


def test_predict_with_the_even_layout_stated_equals_the_default_cut() -> None:
    """GPT-2's 12 blocks on 2 stages: the default cut is 6 + 6 (Megatron's even rule: the
    embedding first, the head last), so stating it changes nothing; 9 + 3 moves blocks off the
    stage with GPT-2's 50,257-word head (faster here), 11 + 1 loads stage 0 (slower)."""
    sc = Scenario(
        system="dgx-a100", gpus=2, model="gpt2", batch_per_gpu=8, pp=2, microbatch=1,
        fidelity="analytic",
    )  # fmt: skip
    base = predict(sc).iteration_time_s
    assert predict(replace(sc, pipeline_layout="Et*6|t*6L")).iteration_time_s == base
    assert predict(replace(sc, pipeline_layout="Et*9|t*3L")).iteration_time_s < base
    assert predict(replace(sc, pipeline_layout="Et*11|tL")).iteration_time_s > base


def test_cli_refuses_a_bad_layout_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--system", "dgx-a100", "--gpus", "2", "--model", "gpt2"]
    argv += ["--batch-per-gpu", "8", "--plan", "pp=2", "--fidelity", "analytic"]
    assert main([*argv, "--pipeline-layout", "Et*6|t*5L"]) == 2
    err = capsys.readouterr().err
    assert "pipeline_layout='Et*6|t*5L'" in err and "model gpt2 has 12" in err
    assert main([*argv, "--pipeline-layout", "Et*6|t*6"]) == 2
    assert "the loss 'L' must be the last layer" in capsys.readouterr().err
