"""--model-arg: one parser for predict, model show/maxbatch and compare; same typed values, same
errors, several KEY=VALUE after one flag and the flag repeatable."""

import json
from typing import Any

import pytest

import perfmodel.search.compare
import perfmodel.workload
import perfmodel.workload.memory
from perfmodel.cli import _common, compare, main, model, predict
from perfmodel.cli._common import list_valued_model_args, parse_model_args
from perfmodel.errors import ConfigError


def _typed(d: dict[str, Any]) -> dict[str, Any]:
    """``{k: (type name, value)}``: ``True == 1`` would hide a bool that became an int."""
    return {k: (type(v).__name__, v) for k, v in d.items()}


def test_predict_model_args_after_one_flag(capsys):
    code = main(
        [
            "predict", "--system", "dgx1-v100", "--gpus", "1", "--model", "resnet50",
            "--model-arg", "image_size=128", "num_classes=10", "--batch-per-gpu", "8",
            "--fidelity", "analytic", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["model_args"] == {"image_size": 128, "num_classes": 10}


def test_model_show_model_args_after_one_flag(capsys):
    assert (
        main(
            [
                "model",
                "show",
                "resnet50",
                "--model-arg",
                "image_size=64",
                "num_classes=10",
                "--batch",
                "2",
            ]
        )
        == 0
    )
    assert "resnet50" in capsys.readouterr().out


def test_scenario_booleans_from_files_are_parsed_not_truth_tested():
    from perfmodel.api import Scenario

    base = {"system": "dgx1-v100", "model": "gpt", "batch_per_gpu": 1}
    assert Scenario.from_dict({**base, "sequence_parallel": "false"}).sequence_parallel is False
    assert Scenario.from_dict({**base, "sequence_parallel": "Yes"}).sequence_parallel is True
    with pytest.raises(ConfigError, match="sequence_parallel"):
        Scenario.from_dict({**base, "sequence_parallel": "maybe"})


# ------------------------------------------------------------------ the conversion rule


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["image_size=128", "num_classes=10"], {"image_size": 128, "num_classes": 10}),
        (["layers=-1", "hidden=+64"], {"layers": -1, "hidden": 64}),
        (["flash_attention=true", "dropout=False"], {"flash_attention": True, "dropout": False}),
        (["flash_attention=YES", "aux_logits=no"], {"flash_attention": True, "aux_logits": False}),
        (["tied_embeddings=on", "dropout=off"], {"tied_embeddings": True, "dropout": False}),
        (["widths=784,100,10"], {"widths": [784, 100, 10]}),
        (["widths=784x100x10"], {"widths": [784, 100, 10]}),
        (["cutoffs=20000"], {"cutoffs": [20000]}),
        (["cutoffs=20000,40000,"], {"cutoffs": [20000, 40000]}),
        (["activation=gelu", "head=none"], {"activation": "gelu", "head": "none"}),
        # not an integer, boolean or integer list: text, which the zoo reads or rejects
        (["num_classes=10.5", "widths=1,a"], {"num_classes": "10.5", "widths": "1,a"}),
        ([" seq_len = 512 "], {"seq_len": 512}),
        (["layers=2", "layers=4"], {"layers": 4}),  # later items win
        (["k=a=b"], {"k": "a=b"}),
        ([], {}),
    ],
)
def test_shared_rule(items, expected):
    assert _typed(parse_model_args(items)) == _typed(expected)


def test_every_command_uses_the_shared_parser():
    assert predict.parse_model_args is _common.parse_model_args
    assert model.parse_model_args is _common.parse_model_args  # tests/workload imports it there
    assert compare.parse_model_args is _common.parse_model_args


def test_list_arguments_come_from_the_zoo():
    assert {"widths", "cutoffs"} <= list_valued_model_args()
    assert "layers" not in list_valued_model_args()


# --------------------------------------------------- the same typed dict through each command

#: gpt2, tiny; a bool spelled "yes" and one given after a second --model-arg flag.
GPT_ITEMS = ["layers=2", "hidden=128", "heads=2", "seq_len=64", "vocab=1000", "flash_attention=yes"]
GPT_MORE = ["tied_embeddings=false"]
GPT_TYPED = {
    "layers": 2,
    "hidden": 128,
    "heads": 2,
    "seq_len": 64,
    "vocab": 1000,
    "flash_attention": True,
    "tied_embeddings": False,
}
MARGS = ["--model-arg", *GPT_ITEMS, "--model-arg", *GPT_MORE]


class _Stop(Exception):
    pass


def _spy(monkeypatch, module, name, seen, *, stop=False):
    real = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        if stop:
            raise _Stop
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


def _model_args_of(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k in GPT_TYPED}


def test_shared_parser_gives_the_typed_dict():
    assert _typed(parse_model_args(GPT_ITEMS + GPT_MORE)) == _typed(GPT_TYPED)


def test_predict_passes_the_typed_dict(capsys):
    argv = ["predict", "--system", "dgx1-v100", "--gpus", "1", "--model", "gpt2", *MARGS]
    argv += ["--batch-per-gpu", "2", "--fidelity", "analytic", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert _typed(out["scenario"]["model_args"]) == _typed(GPT_TYPED)


def test_model_show_passes_the_typed_dict(monkeypatch, capsys):
    seen: list[Any] = []
    _spy(monkeypatch, perfmodel.workload, "build_model", seen)
    assert main(["model", "show", "gpt2", *MARGS, "--json"]) == 0
    assert _typed(_model_args_of(seen[0][1])) == _typed(GPT_TYPED)
    out = json.loads(capsys.readouterr().out)
    assert _typed(_model_args_of(out["totals"]["model_args"])) == _typed(GPT_TYPED)


def test_model_maxbatch_passes_the_typed_dict(monkeypatch, capsys):
    seen: list[Any] = []
    _spy(monkeypatch, perfmodel.workload.memory, "max_batch_size", seen)
    assert main(["model", "maxbatch", "gpt2", "--gpu", "V100-SXM2-16GB", *MARGS, "--json"]) == 0
    assert _typed(_model_args_of(seen[0][1])) == _typed(GPT_TYPED)
    assert json.loads(capsys.readouterr().out)["batch_size"] > 0


def test_compare_passes_the_typed_dict(monkeypatch):
    seen: list[Any] = []
    _spy(monkeypatch, perfmodel.search.compare, "search_plans", seen, stop=True)
    argv = ["compare", "--system", "dgx1-v100", "--model", "gpt2", *MARGS]
    with pytest.raises(_Stop):
        main([*argv, "--global-batch", "8", "--json"])
    assert _typed(seen[0][0][0]["model_args"]) == _typed(GPT_TYPED)


def test_predict_flags_equal_a_toml_scenario_with_typed_values(tmp_path, capsys):
    toml = tmp_path / "s.toml"
    toml.write_text(
        'system = "dgx1-v100"\nmodel = "gpt2"\ngpus = 1\nbatch_per_gpu = 2\n'
        'fidelity = "analytic"\n[model_args]\nlayers = 2\nhidden = 128\nheads = 2\n'
        "seq_len = 64\nvocab = 1000\nflash_attention = true\ntied_embeddings = false\n"
    )
    assert main(["predict", str(toml), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    argv = ["predict", "--system", "dgx1-v100", "--gpus", "1", "--model", "gpt2", *MARGS]
    assert main([*argv, "--batch-per-gpu", "2", "--fidelity", "analytic", "--json"]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    assert _typed(from_flags["scenario"]["model_args"]) == _typed(
        from_file["scenario"]["model_args"]
    )
    assert from_flags["scenario"] == from_file["scenario"]
    assert from_flags["iteration_time_s"] == from_file["iteration_time_s"]


# ------------------------------------------------------------------------ malformed items

BAD = ["foo", "=3", "k=", " =1"]

COMMANDS = {
    "predict": ["predict", "--system", "dgx1-v100", "--model", "gpt2", "--batch-per-gpu", "2"],
    "model show": ["model", "show", "gpt2"],
    "model maxbatch": ["model", "maxbatch", "gpt2", "--gpu", "V100-SXM2-16GB"],
    "compare": ["compare", "--system", "dgx1-v100", "--model", "gpt2", "--global-batch", "8"],
}


@pytest.mark.parametrize("item", BAD)
def test_shared_parser_rejects_malformed_items(item):
    with pytest.raises(ConfigError) as info:
        parse_model_args(["layers=2", item])
    assert info.value.value == item and info.value.where == "--model-arg"
    assert repr(item) in str(info.value)


@pytest.mark.parametrize(
    ("items", "says"),
    [
        (["foo", "k="], "'foo': expected KEY=VALUE (e.g. seq_len=512)"),
        ([" =1"], "' =1': expected KEY=VALUE (e.g. seq_len=512)"),
        (["k= ", "foo"], "'k= ': expected KEY=VALUE with a non-empty value (e.g. seq_len=512)"),
    ],
)
def test_the_first_malformed_item_is_named_with_its_fault(items, says):
    """The split is ``_schema.split_assignments`` (the ``--software-option`` one); the blank
    value is ``--model-arg``'s own rule on top; items are checked in order."""
    with pytest.raises(ConfigError) as info:
        parse_model_args(["layers=2", *items])
    assert str(info.value) == f"--model-arg {says}"
    assert info.value.value == items[0] and info.value.where == "--model-arg"


@pytest.mark.parametrize("item", BAD)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_reports_a_malformed_item(command, item, monkeypatch, capsys):
    monkeypatch.setattr(perfmodel.search.compare, "search_plans", _never)
    code = main([*COMMANDS[command], "--model-arg", "layers=2", item])
    assert code == 2  # perfmodel.cli.main: PerfModelError -> one line on stderr, exit 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("perfmodel: error: --model-arg") and repr(item) in err
    assert "usage:" not in captured.err  # a ConfigError, not an argparse type error


def _never(*args, **kwargs):  # pragma: no cover - reached only if the bad item got through
    raise AssertionError("compare searched despite a malformed --model-arg")
