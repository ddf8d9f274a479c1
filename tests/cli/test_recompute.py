"""`ndcp recompute --help`'s examples run as written: a user who copies one gets its frontier, and the launch file
where it asks for one (--emit writes the frontier's fastest plan only when the trainer runs it)."""
import shlex

import pytest

from ndcp.cli.recompute import EXAMPLE
from tests.cli_helpers import run

COMMANDS = [shlex.split(command) for command in EXAMPLE.replace("\\\n", " ").splitlines()]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[1:3]) for c in COMMANDS])
def test_each_help_example_exits_0_and_writes_what_it_names(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # the examples' run.sh / frontier.json land here
    assert command[:2] == ["ndcp", "recompute"]
    code, out, err = run(capsys, *command[1:], "--quiet")
    assert code == 0, err
    assert out.startswith("frontier: ")
    for flag in ("--emit-file", "--json"):
        if flag in command:
            assert (tmp_path / command[command.index(flag) + 1]).stat().st_size > 0, flag
