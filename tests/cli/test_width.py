"""Every command's output reads at 80 columns: no line wider, nothing cut with an ellipsis, no word (a number, a
name, a degree, a plan's piece) broken across lines, in a table cell or anywhere else rich wraps text; every
--help wraps between words (argparse, to COLUMNS), its examples within the width."""
import io
import re
import sys
from pathlib import Path

import pytest
import rich._wrap

from ndcp.cli import build_parser
from ndcp.cli.common import print_note

from ..cli_helpers import run

WIDTH = 80
TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]
# Per-stage plans of several Megatron modules, ties, and a ranking that leaves out columns at 80.
TINY_MOE_TIGHT = ["tiny-moe", "--device", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "8192",
                  "--memory-cap", "4GiB"]
# A small DeepSeek-style model: MLA, MoE after two dense layers; under a tight cap its per-stage plans combine
# several Megatron modules and leave the 80-column ranking no room for them (listed under it).
TINY_MLA_YAML = """name: tiny-mla
source: "synthetic: MLA, MoE after two dense layers, for the 80-column test"
layers: 32
hidden: 512
heads: 8
ffn_hidden: 1376
vocab: 1024
activation: swiglu
max_positions: 8192
position_embedding: rope
tied_embeddings: false
norm: rmsnorm
mla: {q_lora_rank: 128, kv_lora_rank: 64, qk_rope_head_dim: 16, qk_nope_head_dim: 32, v_head_dim: 32}
moe: {experts: 8, top_k: 2, expert_ffn_hidden: 512, shared_experts: 1, first_dense_layers: 2}
"""
PP64 = ["llama3.1-405b", "--device", "h100", "--gpus", "2048", "--global-batch", "2048", "--seq-len", "8192",
        "--strategy", "tp=8,pp=64,mbs=1,zero=1,sp=on,recompute=full"]
COMMANDS = {
    "search": ["search", *TINY],
    "search per-stage plans": ["search", *TINY_MOE_TIGHT, "--max", "tp=1"],
    "search nothing fits": ["search", *TINY, "--memory-cap", "0.1GiB", "--recompute", "uniform"],
    "estimate": ["estimate", *PP64],
    "recompute": ["recompute", *TINY_MOE_TIGHT, "--strategy", "pp=2", "--points", "3"],
    "sweep": ["sweep", *TINY[:1], "--device", "h100,b200", "--gpus", "8,16", "--global-batch", "32", "--seq-len",
              "1024", "--tokens", "1T", "--price-per-gpu-hour", "2.5", "--workers", "1", "--recompute", "uniform"],
    "validate": ["validate", "examples/published_runs.yaml"],
    "models": ["models"],
    "devices": ["devices"],
}


@pytest.fixture
def broken_words(monkeypatch):
    """The words rich had to break across lines (it breaks a word only when no line can hold it)."""
    broken = []
    chop = rich._wrap.chop_cells

    def recording_chop(text, width, *args, **kwargs):
        lines = chop(text, width, *args, **kwargs)
        if len(lines) > 1:
            broken.append(text.strip())
        return lines

    monkeypatch.setattr(rich._wrap, "chop_cells", recording_chop)
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    return broken


def assert_readable(text: str, broken: list[str]) -> None:
    assert "…" not in text, [line for line in text.splitlines() if "…" in line][0]
    wide = [line for line in text.splitlines() if len(line.rstrip()) > WIDTH]
    assert not wide, wide[0]
    assert not broken, f"broken across lines: {broken[0]!r}"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_report_reads_at_80_columns(capsys, broken_words, name):
    code, out, err = run(capsys, *COMMANDS[name])
    assert code in (0, 1), err
    assert out.strip()
    assert_readable(out, broken_words)
    assert "['" not in out + err  # options named as words, never a Python list


def test_plans_without_room_in_the_ranking_go_under_it(capsys, broken_words, tmp_path):
    model = tmp_path / "tiny-mla.yaml"
    model.write_text(TINY_MLA_YAML)
    code, out, err = run(capsys, "search", model, "--device", "h100", "--gpus", "8", "--global-batch", "64",
                         "--seq-len", "8192", "--memory-cap", "5GiB", "--top", "5", "--trainer", "any")
    assert code == 0, err
    assert_readable(out, broken_words)
    plans = out[out.index("Recompute plans"):out.index("Best strategy")]
    assert re.search(r"^#1 \d+n/0s/\S*ln\+mla", plans, re.MULTILINE)  # the winner's plan, whole
    legend = " ".join(plans.split())
    assert "ln layernorm" in legend and "mla mla_up_proj" in legend and "+ joins the Megatron" in legend


def test_calibrate_reads_at_80_columns(capsys, broken_words, tmp_path, monkeypatch):
    runs = Path("examples/published_runs.yaml").resolve()
    monkeypatch.chdir(tmp_path)  # the file it writes named as a user would name it, not by a temporary path
    code, out, err = run(capsys, "calibrate", str(runs), "--device", "h100", "--output", "fitted.yaml")
    assert code == 0, err
    assert_readable(out, broken_words)


def command_names() -> list[str]:
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    return list(subparsers.choices)


@pytest.mark.parametrize("command", [None, *command_names()])
def test_every_help_wraps_between_words(capsys, broken_words, command):
    code, out, _ = run(capsys, *([command] if command else []), "--help")
    assert code == 0
    lines = out.splitlines()
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, wide[0]
    hyphen_breaks = [line for line in lines if re.search(r"[a-z]-$", line)]  # e.g. "data-" / "parallel"
    assert not hyphen_breaks, hyphen_breaks[0]
    verbatim = [line for line in out[out.index("example"):].splitlines() if line.startswith(" ")]
    assert verbatim and all(line.startswith(("  ndcp ", "      --")) for line in verbatim)  # as written


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


NOTE = "Megatron recomputes one module set on every layer: the plan's layernorm, mla_up_proj per stage became full"


def test_notes_wrap_between_words_on_a_terminal_and_stay_one_line_in_a_log(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    print_note(NOTE)
    lines = terminal.getvalue().splitlines()
    assert len(lines) > 2 and all(len(line) < 40 for line in lines)
    assert " ".join(" ".join(lines).split()) == f"ndcp: note: {NOTE}"  # every word whole, in order
    assert all(line.startswith("    ") for line in lines[1:])
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    print_note(NOTE)
    assert log.getvalue() == f"ndcp: note: {NOTE}\n"
