"""The one ``NAME=VALUE`` reader (:func:`perfmodel._schema.split_assignments`) and its two
callers: ``--software-option`` (values stripped, later items win) and ``--nccl-env`` (values
as NCCL reads them, unstripped)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel._schema import split_assignments
from perfmodel.cli.predict import _software_options
from perfmodel.comm.nccl_env import NcclEnv
from perfmodel.comm.nccl_env import split_assignments as nccl_split
from perfmodel.errors import ConfigError

_NAME = st.text(st.characters(blacklist_characters="="), min_size=1).filter(str.strip)


@given(_NAME, st.text())
def test_splits_at_the_first_equals_sign_keeping_the_value(name: str, value: str) -> None:
    pairs = split_assignments([f"{name}={value}"], where="--x", example="a=1")
    assert pairs == [(name.strip(), value)]


@pytest.mark.parametrize("item", ["novalue", "=1", "  =1", ""])
def test_a_text_without_a_name_names_the_flag_form_and_example(item: str) -> None:
    with pytest.raises(ConfigError) as err:
        split_assignments(["a=1", item], where="--x", example="a=1", form="KEY=VALUE")
    assert str(err.value) == f"--x {item!r}: expected KEY=VALUE (e.g. a=1)"
    assert err.value.where == "--x" and err.value.value == item


def test_software_options_strip_and_later_items_win() -> None:
    opts = _software_options([" bucket_mb = 50 ", "tp_comm_overlap=false", "bucket_mb=60"])
    assert opts == {"bucket_mb": "60", "tp_comm_overlap": "false"}
    with pytest.raises(ConfigError) as err:
        _software_options(["tp_comm_overlap"])
    assert str(err.value) == (
        "--software-option 'tp_comm_overlap': expected KEY=VALUE (e.g. tp_comm_overlap=false)"
    )


def test_nccl_values_stay_unstripped_as_nccl_reads_them() -> None:
    """NCCL reads ``NCCL_ALGO`` without stripping (``" ring"`` is no algorithm): the pairs
    keep the value as written, so the environment refuses it as NCCL does."""
    assert nccl_split(["NCCL_ALGO= ring"], where="--nccl-env") == [("NCCL_ALGO", " ring")]
    with pytest.raises(ConfigError, match="NCCL_ALGO"):
        NcclEnv.parse_assignments(["NCCL_ALGO= ring"])
    assert NcclEnv.parse_assignments(["NCCL_ALGO=ring"]).variables == (("NCCL_ALGO", "ring"),)
    with pytest.raises(ConfigError) as err:
        nccl_split(["NCCL_ALGO"], where="--nccl-env")
    assert str(err.value) == "--nccl-env 'NCCL_ALGO': expected NAME=VALUE (e.g. NCCL_NVLS_ENABLE=0)"
