"""`--images-per-sample` / `--image-size` on a vision-language model: checked inputs, the encoder on stage 0, and
the submodules in --json (docs/models.md §5)."""
import json
from pathlib import Path

from .cli_helpers import assert_one_line_error, run

FIXTURES = Path(__file__).parent / "specs" / "fixtures"
LLAVA = ["estimate", str(FIXTURES / "llava-1.5-7b-hf"), "--device", "h100", "--gpus", "8", "--global-batch", "64",
         "--seq-len", "2048", "--strategy", "tp=2,pp=2"]


def _json(capsys, *args):
    code, out, err = run(capsys, *args, "--json", "-")
    assert code == 0, err
    return json.loads(out)


def test_an_image_costs_time_and_memory_on_stage_0(capsys):
    text, image = _json(capsys, *LLAVA), _json(capsys, *LLAVA, "--images-per-sample", "1")
    assert [m["name"] for m in image["model"]["submodules"]] == ["vision_encoder", "projector", "language_model"]
    assert image["run"]["images_per_sample"] == 1
    assert image["time"]["step_seconds"] > text["time"]["step_seconds"]
    stages = image["memory"]["stages"]
    assert stages[0]["parts"]["encoder_activations"] > 0 == stages[1]["parts"]["encoder_activations"]
    assert stages[0]["total_bytes"] > text["memory"]["stages"][0]["total_bytes"]
    code, out, _ = run(capsys, *LLAVA, "--images-per-sample", "1")
    assert code == 0 and "encoder activations" in out


def test_image_inputs_are_checked(capsys):
    tiny = ["estimate", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "8", "--seq-len", "512"]
    assert_one_line_error(*run(capsys, *tiny, "--images-per-sample", "1"), "no vision encoder")
    assert_one_line_error(*run(capsys, *LLAVA, "--image-size", "336"), "--images-per-sample")
    assert_one_line_error(*run(capsys, *LLAVA, "--images-per-sample", "4"), "576 image tokens", "--seq-len")
    assert_one_line_error(*run(capsys, *LLAVA, "--images-per-sample", "1", "--image-size", "300"), "multiple of 14")
    qwen = ["estimate", str(FIXTURES / "qwen2-vl-7b-instruct"), "--device", "h100", "--gpus", "8", "--global-batch",
            "16", "--seq-len", "4096", "--images-per-sample", "1"]
    assert_one_line_error(*run(capsys, *qwen), "--image-size")
    code, _, err = run(capsys, *qwen, "--image-size", "448", "--strategy", "tp=4")
    assert code == 0, err


def test_search_proves_an_optimum_on_gemma_3(capsys):
    code, out, err = run(capsys, "search", str(FIXTURES / "gemma-3-4b-pt"), "--device", "h100", "--gpus", "8",
                         "--global-batch", "16", "--seq-len", "4096", "--images-per-sample", "2", "--quiet")
    assert code == 0, err
    assert out.startswith("optimal:") and "proven optimal" in out
