"""The Python API (ndcp.api, docs/api.md): `ndcp.search` and `ndcp.estimate` answer with the document the command's
`--json` writes, under the same options, defaults, checks and search policy, and refuse what the command refuses
with its message."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ndcp
from ndcp.api import plan_search, search_values
from ndcp.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_same_answers import strip_clock  # noqa: E402  (the wall-clock fields, removed before comparing)


def cli_json(capsys, *argv: str) -> dict:
    """The `--json -` document of `ndcp ARGV`, run in-process."""
    assert main([*argv, "--json", "-"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


PROBLEM = dict(device="h100", gpus=8, global_batch=32, seq_len=4096)
SEARCHES = [
    # (API keywords, the same search on the command line)
    (dict(model="tiny", device="h100", gpus=8, global_batch=32, seq_len=1024),
     "search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024"),
    # an explicit trainer: the policy searches its uniform plans (trainer_method) under a cap
    (dict(model="llama3-8b", device="h100", gpus=8, global_batch=32, seq_len="4k", trainer="torchtitan",
          memory_cap="40GiB"),
     "search llama3-8b --device h100 --gpus 8 --global-batch 32 --seq-len 4096 --trainer torchtitan "
     "--memory-cap 40GiB"),
    # Python values for the flags' text: a dict for --fix, a tuple for --zero, numbers
    (dict(model="tiny", device="h100", gpus=8, global_batch=32, seq_len=1024, fix={"tp": 2}, recompute="uniform",
          top=3, zero=(1, 2), time_limit=30),
     "search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024 --fix tp=2 --recompute uniform --top 3 "
     "--zero 1,2 --time-limit 30"),
]


@pytest.mark.parametrize("keywords, command", SEARCHES, ids=["defaults", "trainer-policy", "python-values"])
def test_search_answers_as_the_command_line_json(capsys, keywords, command):
    keywords = dict(keywords)
    answer = ndcp.search(keywords.pop("model"), **keywords)
    assert answer["status"] == "optimal" and answer["strategies"]
    assert strip_clock(answer) == strip_clock(cli_json(capsys, *command.split()))


def test_the_search_policy_is_the_apis():
    """A search plans for a trainer (megatron by default): one that runs one recompute option on every layer searches
    uniform plans, with a note (the command line prints it) when --trainer named it; --trainer any searches per-layer
    plans."""
    for trainer, method, noted in ((None, "uniform", False), ("torchtitan", "uniform", True),
                                   ("megatron", "uniform", True), ("any", "per-layer", False)):
        planned = plan_search(search_values("llama3-8b", **PROBLEM, trainer=trainer))
        assert planned.method == method and bool(planned.notes) == noted
        assert planned.trainer == (None if trainer == "any" else trainer or "megatron")
        assert planned.run.trainer == ("megatron" if trainer in (None, "any") else trainer)


def test_estimate_answers_as_the_command_line_json(capsys):
    answer = ndcp.estimate("llama3-8b", device="h100", gpus=8, global_batch=32, seq_len=4096,
                           strategy={"tp": 2, "sp": True}, overlap="tp")
    command = "estimate llama3-8b --device h100 --gpus 8 --global-batch 32 --seq-len 4096 --overlap tp --strategy tp=2,sp=on"
    assert answer == cli_json(capsys, *command.split())
    assert answer["run"]["overlap"] == "tp" and answer["strategy"]["tp"] == 2


def cli_error(capsys, *argv: str) -> str:
    """The message of `ndcp ARGV`'s one `ndcp: error:` line."""
    assert main(list(argv)) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("ndcp: error: ")
    return line.removeprefix("ndcp: error: ")


ERRORS = [
    ({"memory_cap": "100GiB"}, ["--memory-cap", "100GiB"]),  # a check of the policy (build_problem)
    ({"fix": "tp=3"}, ["--fix", "tp=3"]),  # a --fix check (check_fixed_values)
    ({"top": 0}, ["--top", "0"]),  # a value refused by the flag's type
    ({"precision": "fp4"}, ["--precision", "fp4"]),  # a value outside the flag's choices
]


@pytest.mark.parametrize("keywords, flags", ERRORS, ids=["cap", "fix", "type", "choice"])
def test_errors_raise_spec_error_with_the_command_line_message(capsys, keywords, flags):
    with pytest.raises(ndcp.SpecError) as raised:
        ndcp.search("llama3-8b", **PROBLEM, **keywords)
    assert isinstance(raised.value, ValueError)
    argv = ["search", "llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "4096"]
    assert str(raised.value) == cli_error(capsys, *argv, *flags)


def test_an_unknown_option_names_the_valid_ones():
    with pytest.raises(ndcp.SpecError,
                       match=r"unknown option 'memorycap' \(did you mean memory_cap\?\); valid options: .*memory_cap"):
        ndcp.search("llama3-8b", **PROBLEM, memorycap="40GiB")
    with pytest.raises(ndcp.SpecError, match="unknown option 'top'"):  # a search option is no estimate option
        ndcp.estimate("llama3-8b", **PROBLEM, strategy="tp=2", top=3)


def test_importing_ndcp_imports_neither_the_api_nor_the_solver():
    code = "import sys, ndcp; print('ndcp.api' in sys.modules, 'ortools' in sys.modules, callable(ndcp.search))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["False", "False", "True"]


def test_the_documented_example_runs(capsys):
    """docs/api.md's Python blocks run as written."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), {})
    assert capsys.readouterr().out.startswith("optimal {'tp': ")
