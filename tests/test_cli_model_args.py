"""--model-arg takes several KEY=VALUE pairs after one flag, as the issue's usage shows."""

import json

from perfmodel.cli import main


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
    import pytest

    from perfmodel.api import Scenario
    from perfmodel.errors import ConfigError

    base = {"system": "dgx1-v100", "model": "gpt", "batch_per_gpu": 1}
    assert Scenario.from_dict({**base, "sequence_parallel": "false"}).sequence_parallel is False
    assert Scenario.from_dict({**base, "sequence_parallel": "Yes"}).sequence_parallel is True
    with pytest.raises(ConfigError, match="sequence_parallel"):
        Scenario.from_dict({**base, "sequence_parallel": "maybe"})
