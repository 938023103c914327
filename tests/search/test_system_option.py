"""A :class:`~perfmodel.search.system_option.SystemOption` refuses, as it is made, a key no
scenario takes or one the what-if sets itself (user24): the API's options are checked as the
command line's entries are, before :func:`~perfmodel.search.whatif.hardware_whatif` runs any."""

from __future__ import annotations

import pytest

from perfmodel.errors import ConfigError
from perfmodel.search.system_option import SystemOption, parse_systems


@pytest.mark.parametrize(
    ("overrides", "key", "hint"),
    [
        ({"precison": "bf16"}, "precison", "did you mean 'precision'?"),
        ({"nics-per-nod": 4}, "nics_per_nod", "did you mean 'nics_per_node', "),
        ({"system": "dgx-a100"}, "system", "an entry's system is its name"),
        ({"gpus": 8}, "gpus", "give --gpus instead"),
    ],
)
def test_an_option_refuses_a_key_it_cannot_take(overrides: dict, key: str, hint: str) -> None:
    with pytest.raises(ConfigError) as exc:
        SystemOption("mine", "dgx-h100", overrides)
    msg = str(exc.value)
    assert msg.startswith(f"--systems entry 'mine': unknown key {key!r}")
    assert hint in msg
    # a key the what-if sets itself is refused for that reason, with no look-alike offered
    # ('gpus' once read "did you mean 'gpu'?")
    assert ("did you mean" in msg) is (key in ("precison", "nics_per_nod"))


def test_scenario_keys_are_taken() -> None:
    (opt,) = parse_systems("dgx-h100:precision=bf16:network=ib-ndr:nics-per-node=4")
    assert dict(opt.overrides) == {"precision": "bf16", "network": "ib-ndr", "nics_per_node": 4}
