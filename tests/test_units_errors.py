import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel import units
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError, PerfModelError
from perfmodel.ops import CollectiveOp, bus_factor


def test_decimal_binary_and_bits_are_distinct():
    assert units.GB == 1e9
    assert units.GiB == 1073741824
    assert units.Gbit * 8 == units.GB
    assert 40 * units.Gbit == 5e9  # 40 Gb Ethernet carries 5 GB/s raw


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8),
        ("1K", 1024),
        ("128M", 128 * 2**20),
        ("4G", 4 * 2**30),
        ("1KiB", 1024),
        ("0.5K", 512),
    ],
)
def test_parse_size(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "-1K", "0", "1X"])
def test_parse_size_rejects(bad):
    with pytest.raises(ConfigError) as info:
        units.parse_size(bad, where="--sizes")
    assert "--sizes" in str(info.value)


def test_parse_size_range():
    assert units.parse_size_range("1K:4G")[-1] == 4 * 2**30
    assert len(units.parse_size_range("1K:4G")) == 23
    assert units.parse_size_range("1K:64K:4") == [1024, 4096, 16384, 65536]
    with pytest.raises(ConfigError):
        units.parse_size_range("4G:1K")


@given(st.integers(min_value=2, max_value=4096))
def test_bus_factors_bounded(n):
    assert 1.0 <= bus_factor(CollectiveOp.ALLREDUCE, n) < 2.0
    assert 0.5 <= bus_factor(CollectiveOp.ALLGATHER, n) < 1.0
    assert bus_factor(CollectiveOp.BROADCAST, n) == 1.0


def test_enums_parse_with_clear_errors():
    assert CollectiveOp.parse("all_reduce") is CollectiveOp.ALLREDUCE
    assert Precision.parse("BF16") is Precision.BF16
    assert DType.parse("tf32").itemsize == 4
    with pytest.raises(ConfigError) as info:
        Precision.parse("fp12")
    assert "fp12" in str(info.value)
    assert isinstance(info.value, PerfModelError)
    assert info.value.value == "fp12"


def test_precision_recipes():
    assert Precision.FP32.grad_bytes == 4 and not Precision.FP32.mixed
    assert Precision.BF16.grad_bytes == 2 and Precision.BF16.mixed
    assert Precision.TF32.matmul_dtype is DType.TF32


def test_enum_parse_accepts_members():
    assert DType.parse(DType.BF16) is DType.BF16
    assert Precision.parse(Precision.FP16) is Precision.FP16
    assert CollectiveOp.parse(CollectiveOp.ALLTOALL) is CollectiveOp.ALLTOALL


def test_unknown_hardware_message_is_not_quoted():
    from perfmodel.errors import UnknownHardwareError

    err = UnknownHardwareError("unknown GPU model 'xx'", value="xx", where="--gpu")
    assert str(err) == "--gpu: unknown GPU model 'xx'"  # where first, message unquoted
    assert not str(err).startswith('"')
