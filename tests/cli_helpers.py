"""Helpers shared by the CLI tests: run `ndcp` in-process and check the one-line error contract."""
from ndcp.cli import main


def run(capsys, *args):
    """(exit code, stdout, stderr) of `ndcp ARGS` run in-process."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, *words):
    """A user error: exit 2, one line on stderr naming the problem, no traceback."""
    assert code == 2
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ndcp: error: ")
    for word in words:
        assert word in lines[0]
