"""``perfmodel -h COMMAND``: help before the command lists every command (lazy registration)."""

import pytest

from perfmodel.cli import SUBCOMMANDS, _command_of, main


@pytest.mark.parametrize("argv", [["-h", "comm"], ["--help", "comm"], ["--quiet", "-h", "topo"]])
def test_help_before_command_registers_every_command(argv, capsys):
    assert _command_of(argv) is None
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("topo", "comm", "predict", "sweep"):
        assert name in SUBCOMMANDS
        assert f"    {name} " in out


def test_command_before_help_still_lazy():
    assert _command_of(["comm", "-h"]) == "comm"
