"""The README a newcomer reads: at most 150 lines; its set-up and test commands the ones CI runs (.ci/run); every
`ndcp` command in it accepted by the command-line parser; its links and its picture in the repository. docs/cli.md,
generated from the parsers (scripts/render_cli_docs.py), has a section for every command and names every option."""
from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from ndcp.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 150
CODE_BLOCK = re.compile(r"```[a-z]*\n(.*?)```", re.S)
TEST_COMMAND = ".venv/bin/python -m pytest"


def script(name: str):
    """A module of scripts/ (not a package), loaded from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def section(title: str) -> str:
    """The README's text under the `## TITLE...` heading, up to the next heading."""
    match = re.search(rf"^## {re.escape(title)}.*?\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, title
    return match.group(1)


def ndcp_commands(text: str) -> list[list[str]]:
    """The argument lists of the `ndcp` commands in the code blocks of `text` (`$ ` prompts and `&&` chains split;
    `.venv/bin/ndcp` or `ndcp` as the program)."""
    commands = []
    for block in CODE_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.removeprefix("$ ").split("&&"):
                words = shlex.split(part)
                if words and Path(words[0]).name == "ndcp":
                    commands.append(words[1:])
    return commands


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_readme_is_at_most_150_lines():
    assert len(README.splitlines()) <= MAX_LINES


def test_the_set_up_commands_are_the_ones_ci_runs():
    [block] = CODE_BLOCK.findall(section("Set-up"))
    install, test = block.strip().splitlines()
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/ndcp search ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test == TEST_COMMAND and ci[-1] == TEST_COMMAND
    assert "python3 -m venv .venv" in ci


def test_the_quick_start_plans_for_megatron_and_writes_the_launch_file():
    [search, estimate] = ndcp_commands(section("Quick start"))
    assert search[0] == "search" and "--emit" in search and search[search.index("--emit") + 1] == "megatron"
    launch = search[search.index("--emit-file") + 1]
    assert estimate[0] == "estimate" and estimate[estimate.index("--strategy-from") + 1] == launch


@pytest.mark.parametrize("argv", ndcp_commands(README), ids=lambda argv: " ".join(argv[:2]))
def test_every_command_in_the_readme_parses(argv):
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def test_the_command_table_names_every_command_and_only_real_ones():
    named = set(re.findall(r"^\| `ndcp ([a-z]+)|, `ndcp ([a-z]+)", section("Commands"), re.M))
    names = {a or b for a, b in named}
    assert names == set(subcommands())


def test_the_readme_links_and_picture_resolve():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert targets and all((ROOT / t).exists() for t in targets if not t.startswith("https://")), targets
    picture = ROOT / "docs" / "search-report.svg"
    assert "docs/search-report.svg" in targets
    root = ElementTree.parse(picture).getroot()
    assert root.tag.endswith("svg")
    text = picture.read_text(encoding="utf-8").replace("&#160;", " ")
    assert all(part in text for part in ("Assumptions", "certificate", "Memory per device",
                                            "per node, for offload"))


def test_cli_docs_have_every_command_and_option():
    docs = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name, parser in subcommands().items():
        assert f"\n## ndcp {name}\n" in docs, name
        body = docs.split(f"\n## ndcp {name}\n", 1)[1].split("\n## ", 1)[0]
        options = {o for a in parser._actions for o in a.option_strings if o.startswith("--")} - {"--help", "--debug"}
        missing = sorted(o for o in options if not re.search(rf"`{re.escape(o)}(?=[ ,`])", body))
        assert not missing, f"docs/cli.md, ndcp {name}: {missing} (rerun scripts/render_cli_docs.py)"


def test_the_cli_docs_script_writes_a_section_per_command_with_markdown_safe_help():
    render_cli_docs = script("render_cli_docs")
    page = render_cli_docs.render()
    assert [line.removeprefix("## ndcp ") for line in page.splitlines() if line.startswith("## ndcp ")] == \
        list(subcommands())
    # `tp*pp` would start emphasis in Markdown, `<f` a tag; code spans stay as written
    assert render_cli_docs.markdown_text("0 <= f, `a*b` and a*b") == "0 &lt;= f, `a*b` and a\\*b"
    assert render_cli_docs.paragraphs("one\ntwo\n\n  ndcp models\n  ndcp devices") == \
        ["one two", "```\nndcp models\nndcp devices\n```"]


def test_the_picture_script_records_a_real_search_report():
    console = script("render_report_picture").record(
        "search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024 --top 2", width=100)
    text = console.export_text(clear=False)
    assert "Assumptions" in text and "optimal" in text and "Memory per device" in text
    svg = console.export_svg()
    assert svg.startswith("<svg") and "Assumptions" in svg
