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
