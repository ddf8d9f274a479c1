"""The validation report (ndcp/report/validation.py) names, per run, the allocator figure its memory is compared on."""
from pathlib import Path

from rich.console import Console

from ndcp.report.validation import render_validation
from ndcp.validation import validate_file

ROOT = Path(__file__).resolve().parents[2]


def _rendered(width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    render_validation(validate_file(ROOT / "examples" / "measured_runs_2.yaml"), console)
    return console.export_text()


def test_each_compared_peak_says_its_basis_at_any_width():
    for width in (80, 240):
        text = " ".join(_rendered(width).split())
        assert text.count("memory allocated") == 14  # the Megatron-Bridge and Megatron-LM peak rows
        assert text.count("memory reserved") == 6  # the torchtitan rows: the reserved peak torchtitan logs


def test_a_file_with_no_run_compared_says_so_and_names_no_top_0(tmp_path):
    runs = tmp_path / "runs.yaml"
    runs.write_text("runs:\n  - id: x\n    model: {name: m}\n")
    console = Console(width=120, record=True, color_system=None)
    render_validation(validate_file(runs), console)
    text = " ".join(console.export_text().split())
    assert "top-0" not in text and "top-k agreement (by MFU): -" in text
    assert "no run was compared: the table above gives each skipped run's reason" in text
