"""`ndcp replan` as the Python API answers it (ndcp.replanning): a running job's configuration planned again for another
GPU count is the fresh search for that count, keeps what --keep asks or says why not, and reports what
changes and what the checkpoint reshards."""
import pytest

import ndcp
from ndcp.launch import PROBLEM_LINE
from ndcp.specs import Strategy
from ndcp.specs.fields import SpecError
from ndcp.trainers.checkpoints import resharded

PROBLEM = dict(device="h100", global_batch=32, seq_len=1024)


def plans(document):
    return [(s["strategy"], s["time"]["step_seconds"]) for s in document["strategies"]]


def as_strategy(keys):
    return Strategy(**{k: keys[k] for k in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn", "zero")})


def test_with_nothing_kept_it_is_the_fresh_search_for_the_new_count(tiny_megatron_file):
    moved = ndcp.replan(str(tiny_megatron_file), gpus=16)
    fresh = ndcp.search("tiny", gpus=16, trainer="megatron", **PROBLEM)
    assert moved["to"]["status"] == "optimal" and plans(moved["to"]) == plans(fresh)
    assert moved["gpus"] == {"asked": 16, "used": 16} and moved["keep"] is None


def test_it_reports_what_changes_what_reshards_and_the_step_change(tiny_megatron_file):
    moved = ndcp.replan(str(tiny_megatron_file), gpus=16)
    before, after = moved["from"]["strategy"], moved["to"]["strategies"][0]["strategy"]
    assert moved["from"]["gpus"] == 8 and moved["from"]["trainer"] == "megatron"
    assert moved["changes"][0] == {"what": "gpus", "from": 8, "to": 16}
    assert {c["what"] for c in moved["changes"]} - {"gpus", "layers_per_stage"} == \
        {k for k in before if before[k] != after.get(k)}
    assert moved["reshard"] == list(resharded(as_strategy(before), as_strategy(after)))
    assert [c["dimension"] for c in moved["checkpoint"]] == moved["reshard"]
    step = moved["to"]["strategies"][0]["time"]["step_seconds"]
    assert moved["step_seconds_change"] == pytest.approx(step - moved["from"]["step_seconds"])
    assert moved["step_change_fraction"] == pytest.approx(step / moved["from"]["step_seconds"] - 1)


def test_keep_pins_the_file_degrees_and_prices_them_against_the_free_plan(tiny_megatron_file):
    moved = ndcp.replan(str(tiny_megatron_file), gpus=16, keep="tp,pp")
    free = ndcp.replan(str(tiny_megatron_file), gpus=16)["to"]["strategies"][0]
    kept = moved["to"]["strategies"][0]
    assert (kept["strategy"]["tp"], kept["strategy"]["pp"]) == (moved["from"]["strategy"]["tp"],
                                                                  moved["from"]["strategy"]["pp"])
    assert moved["keep"]["honoured"] and moved["keep"]["free"]["strategy"] == free["strategy"]
    assert moved["keep"]["price_seconds"] == pytest.approx(kept["time"]["step_seconds"] - free["time"]["step_seconds"])
    assert moved["keep"]["price_seconds"] >= 0  # both proven optimal on the same GPUs: keeping never pays
    assert "pp" not in moved["reshard"] and "tp" not in moved["reshard"]


def test_a_keep_no_plan_honours_is_refused_with_why_and_the_free_plan_answers(tiny_megatron_file):
    moved = ndcp.replan(str(tiny_megatron_file), gpus=3, keep="pp")  # 3 GPUs: only pp=3 (dp=3 does not divide 32)
    assert moved["keep"]["honoured"] is False and "pp=1" in moved["keep"]["why"]
    assert moved["to"]["strategies"][0]["strategy"]["pp"] == 3 and moved["keep"]["price_seconds"] is None


def test_a_count_no_plan_uses_whole_moves_to_the_fastest_plan_on_fewer_whole_nodes(tiny_megatron_file):
    moved = ndcp.replan(str(tiny_megatron_file), gpus=20)  # 20 = 4 x 5: no degrees of tiny multiply to it with batch 32
    assert moved["gpus"] == {"asked": 20, "used": 16}
    assert plans(moved["to"]) == plans(ndcp.search("tiny", gpus=16, trainer="megatron", **PROBLEM))


def test_a_file_without_a_problem_line_needs_the_model_device_and_count(tiny_megatron_file, tmp_path):
    bare = tmp_path / "hand-written.sh"
    bare.write_text("".join(line for line in tiny_megatron_file.read_text().splitlines(True)
                            if not line.startswith(PROBLEM_LINE)))
    with pytest.raises(SpecError, match="--model, --device, --from-gpus"):
        ndcp.replan(str(bare), gpus=16)
    given = ndcp.replan(str(bare), gpus=16, model="tiny", device="h100", from_gpus=8)
    assert plans(given["to"]) == plans(ndcp.replan(str(tiny_megatron_file), gpus=16)["to"])


def test_options_given_override_the_problem_line(tiny_megatron_file):
    moved = ndcp.replan(str(tiny_megatron_file), gpus=16, memory_cap="1GiB")
    assert moved["to"]["run"]["memory_cap_bytes"] == 2**30
    assert moved["to"]["status"] in ("optimal", "infeasible")
