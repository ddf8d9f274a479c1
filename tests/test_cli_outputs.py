"""Every output option writes through one writer: an unwritable path is one `ndcp: error:` line, exit 2; a reader
that stops early (`| head`) ends the command quietly, exit 0."""
import json
import subprocess
import sys

import pytest

from ndcp.report.output import write_output
from ndcp.specs import SpecError

from .cli_helpers import assert_one_line_error, run

SEARCH = ["search", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "1024",
          "--recompute", "uniform"]
RECOMPUTE = ["recompute", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "1024",
             "--strategy", "pp=2", "--points", "1", "--max-offset", "0"]
MISSING = "/nonexistent/dir/out"


@pytest.mark.parametrize("command", [SEARCH, RECOMPUTE], ids=["search", "recompute"])
@pytest.mark.parametrize("option, name", [("--csv", "x.csv"), ("--json", "x.json"), ("--emit-file", "x.sh"),
                                          ("--plot", "x.svg")])
def test_unwritable_output_is_a_user_error(capsys, command, option, name):
    if option == "--plot":
        pytest.importorskip("matplotlib")
    extra = ["--emit", "megatron"] if option == "--emit-file" else []
    code, out, err = run(capsys, *command, *extra, option, f"{MISSING}/{name}")
    assert_one_line_error(code, out, err, option, f"{MISSING}/{name}", "cannot write")


def test_recompute_csv_to_a_missing_directory_exits_2(capsys):
    code, out, err = run(capsys, *RECOMPUTE, "--csv", f"{MISSING}/x.csv")
    assert_one_line_error(code, out, err, f"--csv {MISSING}/x.csv: cannot write: No such file or directory")


def test_search_csv_to_a_missing_directory_exits_2(capsys):
    code, out, err = run(capsys, *SEARCH, "--csv", f"{MISSING}/x.csv")
    assert_one_line_error(code, out, err, f"--csv {MISSING}/x.csv: cannot write: No such file or directory")


def test_recompute_writes_csv_and_json_files(capsys, tmp_path):
    csv_path, json_path = tmp_path / "frontier.csv", tmp_path / "frontier.json"
    code, out, err = run(capsys, *RECOMPUTE, "--csv", csv_path, "--json", json_path)
    assert code == 0, err
    assert csv_path.read_text().startswith("cap_gib,")
    assert json.loads(json_path.read_text())["frontier"]


def test_write_output_to_stdout_and_files(capsys, tmp_path):
    write_output("a\nb\n", "-", "--csv")
    assert capsys.readouterr().out == "a\nb\n"
    write_output(b"\x89PNG", tmp_path / "x.png", "--plot")
    assert (tmp_path / "x.png").read_bytes() == b"\x89PNG"
    with pytest.raises(SpecError, match=r"--json .*: cannot write: "):
        write_output("{}", tmp_path / "missing" / "x.json", "--json")
    with pytest.raises(SpecError, match="cannot write: ValueError"):
        write_output("{}", "bad\0path.json", "--json")


@pytest.mark.parametrize("command", [["devices"], SEARCH], ids=["table", "report"])
def test_a_reader_that_stops_early_ends_the_command_with_exit_0_and_nothing_on_stderr(command):
    # `ndcp devices | head -0`: rich's console would end it with exit 1, the code of an infeasible search. The reader
    # is gone before the child has imported anything, so its first write finds the pipe closed.
    child = subprocess.Popen([sys.executable, "-m", "ndcp", *command], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={"COLUMNS": "100", "PATH": ""})
    child.stdout.close()
    _, err = child.communicate(timeout=300)
    assert (child.returncode, err) == (0, b"")
