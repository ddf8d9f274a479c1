"""The sweep's table on the terminal: every number whole at 80 columns (the points numbered, named with their
status under the table, when the full table is wider), the full table where it fits; the ideal days labelled."""
from rich.console import Console

from ndcp.sweep.report import print_sweep
from ndcp.specs.library import load_model

WIDE_POINT = dict(device="ascend-910b", gpus=16384, global_batch=16384, seq_len=131072, status="feasible",
                  step_seconds=123.456, mfu=0.553, tokens_per_second=1.36e6, time_to_train_seconds=1234.5 * 86400,
                  ideal_time_to_train_seconds=1111.1 * 86400, goodput=0.9, gpu_hours=8.61e6, cost=2.15e7,
                  label="tp8 pp16 cp1 dp64 ep8 etp1 vpp3 mbs1 z1 sp per-stage 3n/0s/3ln/18ln+mla/4ln+act/6f")
NOTHING_FITS = dict(device="h100", gpus=8, global_batch=32, seq_len=1024, status="infeasible",
                    explanation="no strategy fits")


def printed(width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    print_sweep(console, load_model("tiny"), [WIDE_POINT, NOTHING_FITS], priced=True)
    return console.export_text()


def test_a_narrow_console_numbers_the_points_and_keeps_every_number():
    text = printed(80)
    assert "…" not in text and max(len(line.rstrip()) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if "GPUs" in line).split()
    assert header[:2] == ["#", "GPUs"] and "device" not in header and "status" not in header  # named under it
    for number in ("16384", "123.46", "55.3%", "1.36M", "1,111.1", "90.0%", "1,234.5", "8.61M", "21.5M"):
        assert number in text
    assert "#1 ascend-910b x 16384, GBS 16384, seq 131072 (feasible): tp8 pp16" in text  # the status moves here
    assert "#2 h100 x 8, GBS 32, seq 1024: no strategy fits" in text
    assert "ln layernorm" in " ".join(text.split())  # the plan notation's legend


def test_a_wide_console_shows_the_full_table():
    text = printed(200)
    lines = text.splitlines()
    header = next(line for line in lines if "status" in line).split()
    assert header[:5] == ["device", "GPUs", "GBS", "seq", "status"]
    assert "ideal" in lines[lines.index(next(line for line in lines if "status" in line)) - 1]  # above its "days"
    assert "ascend-910b x 16384, GBS 16384, seq 131072: tp8" in text and "#1 " not in text
