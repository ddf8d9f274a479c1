"""--emit and --strategy-from on the command line: the printed configuration carries the strategy, and reading it
back (`ndcp estimate --strategy-from`) gives the same estimate; `ndcp search --strategy-from` pins what it fixes."""
import json
import shlex

import yaml

from ndcp.cli import main
from ndcp.trainers import KINDS

TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]
ESTIMATE = ["estimate", *TINY, "--strategy", "tp=2,pp=2,mbs=1,zero=1,sp=on,recompute=selective", "-q"]


def option(text: str, name: str) -> str:
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    return tokens[tokens.index(name) + 1]


def run(capsys, *argv) -> tuple[str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_estimate_emit_megatron(capsys):
    out, _ = run(capsys, *ESTIMATE, "--json", "/dev/null", "--emit", "megatron")
    # after the -q line and the comment on the placeholders; TP without FSDP
    assert [line for line in out.split("\n")[1:] if not line.startswith("#")][0] == "export CUDA_DEVICE_MAX_CONNECTIONS=1"
    assert (option(out, "--tensor-model-parallel-size"), option(out, "--pipeline-model-parallel-size")) == ("2", "2")
    assert (option(out, "--global-batch-size"), option(out, "--seq-length")) == ("32", "1024")
    assert "--bf16" in out and "--use-distributed-optimizer" in out


def test_search_emit_winner_torchtitan(capsys):
    # tiny has no torchtitan registry config: no answer without --emit-anyway (the file says what to register)
    out, _ = run(capsys, "search", *TINY, "-q", "--trainer", "torchtitan", "--emit", "torchtitan", "--emit-anyway")
    first, _, rest = out.partition("\n")
    assert first.startswith("optimal: ") and "zero=3" in first
    assert option(rest, "--training.global-batch-size") == "32"


def test_search_emit_mindformers_with_json_needs_file(capsys, tmp_path):
    code = main(["search", *TINY, "--json", "-", "--emit", "mindformers"])
    _, err = capsys.readouterr()
    assert code == 2 and "--emit-file" in err
    path = tmp_path / "mf.yaml"
    run(capsys, "search", *TINY, "--json", "-", "--emit", "mindformers", "--emit-file", str(path))
    assert yaml.safe_load(path.read_text())["parallel_config"]["data_parallel"] >= 1


def test_emit_file_without_emit(capsys):
    code = main([*ESTIMATE, "--emit-file", "/tmp/x"])
    _, err = capsys.readouterr()
    assert code == 2 and "--emit-file needs --emit" in err


def point_time(document: str) -> dict:
    """The `time` object of an estimate's --json without its band: the band rests on the run's features (its
    trainer, its overlaps: docs/evidence.md §2), which a file read back may state otherwise for the same plan."""
    return {k: v for k, v in json.loads(document)["time"].items() if k != "step_seconds_band"}


def test_estimate_strategy_from_each_trainer_gives_the_same_estimate(capsys, tmp_path):
    """A file read back is priced as its trainer runs it: the plan under that trainer (its loss kernel included:
    Megatron's files run the fused loss, MindFormers' Megatron-LM's default)."""
    base = ["estimate", *TINY, "--strategy", "tp=2,mbs=1,zero=3,sp=on,recompute=full", "--json", "-"]  # FSDP: pp 1
    for kind in KINDS:
        path = tmp_path / kind
        expected, _ = run(capsys, *base, "--trainer", kind)
        run(capsys, *base[:-2], "--emit", kind, "--emit-file", str(path), "-q", "--emit-anyway")
        if kind == "torchtitan":  # tiny has no torchtitan registry config: the user names theirs
            path.write_text(path.read_text().replace("MODULE", "llama3").replace("CONFIG", "llama3_8b"))
            continue
        got, _ = run(capsys, "estimate", *TINY, "--strategy-from", str(path), "--json", "-")
        assert json.loads(got)["strategy"] == json.loads(expected)["strategy"], kind
        assert point_time(got) == point_time(expected), kind


def test_search_strategy_from_pins_what_the_file_fixes(capsys, tmp_path):
    path = tmp_path / "megatron.sh"
    run(capsys, "estimate", *TINY, "--strategy", "tp=2,pp=2,mbs=1,zero=1", "--emit", "megatron",
        "--emit-file", str(path), "-q")
    out, _ = run(capsys, "search", *TINY, "--strategy-from", str(path), "-q")
    assert "tp=2 pp=2" in out and "mbs=1" in out and "zero=1" in out


def test_strategy_from_an_unreadable_or_foreign_file_is_one_error_line(capsys, tmp_path):
    path = tmp_path / "x.sh"
    path.write_text("python train.py --lr 3e-4\n")
    code = main(["estimate", *TINY, "--strategy-from", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "cannot tell the trainer" in err


def test_search_under_mindformers_plans_its_select_set_and_reads_it_back(capsys, tmp_path):
    """Under a tight cap MindFormers' winner recomputes the dense SwiGLU activation (select_recompute) on most
    layers; the YAML it emits counts full + select layers per stage, and reads back as the same estimate."""
    args = ["llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "8192",
            "--memory-cap", "24GiB", "--confidence", "0"]  # no measured MindFormers run: at 90 % nothing fits
    path = tmp_path / "mf.yaml"
    out, _ = run(capsys, "search", *args, "--trainer", "mindformers", "-q", "--emit", "mindformers",
                 "--emit-file", str(path))
    assert out.startswith("optimal: ") and "mact" in out and "/0s/" in out  # no selective: MindFormers has none
    counts = {code: int(n) for n, code in (
        (part[:len(part) - len(part.lstrip("0123456789"))], part.lstrip("0123456789"))
        for part in out.split("per-stage ")[1].split(";")[0].split("/"))}
    rc = yaml.safe_load(path.read_text())["recompute_config"]
    assert sum(rc["recompute"]) == counts["f"] and sum(rc["select_recompute"]) == counts["f"] + counts["mact"]
    got, _ = run(capsys, "estimate", *args, "--strategy-from", str(path), "-q")
    assert got.split(": ", 1)[1] == out.split(": ", 1)[1].split("; proven")[0] + "\n"
    megatron, _ = run(capsys, "search", *args, "--trainer", "megatron", "-q")
    assert "mact" not in megatron


# -- the emitted file is the plan, or no answer -----------------------------------------------------------------
PER_STAGE_PLAN = ("{tp: 8, pp: 4, mbs: 1, zero: 1, sp: on, recompute: {stages: [{none: 18, full: 2}, {none: 20}, "
                  "{none: 20}, {none: 19, full: 1}]}}")


def per_stage(tmp_path) -> list[str]:
    """`ndcp estimate` of a plan with 2, 0, 0, 1 fully recomputed layers per stage: Megatron runs one count on every
    stage (2 here)."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PER_STAGE_PLAN)
    return ["estimate", "llama3-70b", "--device", "h100", "--gpus", "64", "--global-batch", "128", "--seq-len",
            "8192", "--strategy-file", str(plan)]


def test_emit_of_a_plan_the_trainer_cannot_run_exits_1_and_writes_nothing(capsys, tmp_path):
    path = tmp_path / "launch.sh"
    code = main([*per_stage(tmp_path), "-q", "--emit", "megatron", "--emit-file", str(path)])
    _, err = capsys.readouterr()
    assert code == 1 and not path.exists()
    assert "megatron file: the file runs a" in err and "--emit-anyway writes it" in err


def test_emit_anyway_writes_the_file_saying_what_is_wrong(capsys, tmp_path):
    path = tmp_path / "launch.sh"
    out, _ = run(capsys, *per_stage(tmp_path), "-q", "--emit", "megatron", "--emit-file", str(path), "--emit-anyway")
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ndcp: WARNING: ") and "--recompute-num-layers 2" in path.read_text()


def test_search_json_has_the_emitted_block(capsys, tmp_path):
    out, _ = run(capsys, "search", *TINY, "--json", "-", "--emit", "megatron", "--emit-file", str(tmp_path / "m"))
    doc = json.loads(out)
    emitted, best = doc["emitted"], doc["strategies"][0]
    assert emitted["trainer"] == "megatron" and emitted["same_as_plan"] and emitted["fits"]
    assert (emitted["step_seconds"], emitted["peak_bytes"]) == (best["time"]["step_seconds"],
                                                                best["memory"]["peak_bytes"])
    assert doc["planned_for"] == "megatron"


def test_emit_without_trainer_plans_for_that_trainer(capsys):
    out, _ = run(capsys, "search", *TINY, "--json", "-", "--emit", "torchtitan", "--emit-file", "/dev/null",
                 "--emit-anyway")
    doc = json.loads(out)
    assert doc["planned_for"] == "torchtitan" and doc["run"]["trainer"] == "torchtitan"
    assert doc["emitted"]["same_as_plan"] and not doc["emitted"]["launchable"]  # no torchtitan config for tiny


def test_trainer_any_shows_the_trainers_best_beside(capsys):
    big = ["llama3-70b", "--device", "h100", "--gpus", "64", "--global-batch", "128", "--seq-len", "8192",
           "--memory-cap", "40GiB"]
    out, err = run(capsys, "search", *big, "--trainer", "any", "--json", "-", "--time-limit", "60")
    doc = json.loads(out)
    beside = doc["trainer_plan"]
    assert doc["planned_for"] == "any" and beside["trainer"] == "megatron"
    ours, theirs = doc["strategies"][0]["time"]["step_seconds"], beside["best"]["time"]["step_seconds"]
    assert theirs >= ours and beside["faster_by"] == 1 - ours / theirs


def test_estimate_refuses_trainer_any(capsys):
    code = main([*ESTIMATE, "--trainer", "any"])
    _, err = capsys.readouterr()
    assert code == 2 and "--trainer any: an estimate prices one trainer" in err


MOE = ["tiny-moe", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]


def test_strategy_from_takes_the_files_overlaps_and_refuses_a_contradicting_overlap(capsys, tmp_path):
    """A Megatron file planned with --overlap ep states --overlap-moe-expert-parallel-comm; estimating it without
    --overlap runs the file's overlaps (the plan's time, not the exposed all-to-all's), and an --overlap that
    names others is one error line."""
    path = tmp_path / "moe.sh"
    plan = ["estimate", *MOE, "--strategy", "ep=4,mbs=1,zero=1,recompute=selective", "--json", "-"]
    expected, _ = run(capsys, *plan, "--overlap", "ep")
    exposed, _ = run(capsys, *plan)
    run(capsys, *plan[:-2], "--overlap", "ep", "--emit", "megatron", "--emit-file", str(path), "-q")
    assert "--overlap-moe-expert-parallel-comm" in path.read_text()
    got, _ = run(capsys, "estimate", *MOE, "--strategy-from", str(path), "--json", "-")
    assert point_time(got) == point_time(expected) != point_time(exposed)
    code = main(["estimate", *MOE, "--strategy-from", str(path), "--overlap", "none"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "--overlap none contradicts --strategy-from" in err


def test_strategy_from_takes_the_files_loss_kernel_and_refuses_a_contradicting_one(capsys, tmp_path):
    """A Megatron script without --cross-entropy-loss-fusion (Megatron-LM's default, a hand-written one) runs the
    unfused loss: estimating it without --loss-kernel prices that loss, as --loss-kernel unfused does; ndcp's own
    file (the fused loss by default) reads back at the plan's; a --loss-kernel the file does not run is one error
    line naming the setting."""
    path = tmp_path / "launch.sh"
    plan = ["estimate", *TINY, "--strategy", "tp=2,pp=2,mbs=1,zero=1,sp=on,recompute=selective", "--json", "-"]
    fused, _ = run(capsys, *plan)
    unfused, _ = run(capsys, *plan, "--loss-kernel", "unfused")
    run(capsys, *plan[:-2], "--emit", "megatron", "--emit-file", str(path), "-q")
    assert "--cross-entropy-loss-fusion" in path.read_text()
    got, _ = run(capsys, "estimate", *TINY, "--strategy-from", str(path), "--json", "-")
    assert point_time(got) == point_time(fused)
    path.write_text(path.read_text().replace("--cross-entropy-loss-fusion", ""))
    got, _ = run(capsys, "estimate", *TINY, "--strategy-from", str(path), "--json", "-")
    assert point_time(got) == point_time(unfused)
    assert point_time(unfused)["step_seconds"] > point_time(fused)["step_seconds"]
    code = main(["estimate", *TINY, "--strategy-from", str(path), "--loss-kernel", "native"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "set --loss-kernel unfused" in err


def test_a_pytorch_fsdp_megatron_does_not_run_is_said_when_emitting_megatron_fsdp(capsys):
    """--fsdp-version prices a PyTorch FSDP's gradient copies; the Megatron file runs Megatron FSDP, which makes none:
    the file read back is its own step, not the plan's, so it is no answer (written only with --emit-anyway)."""
    argv = ["estimate", *TINY, "--strategy", "zero=3", "-q", "--emit", "megatron"]
    _, plain = run(capsys, *argv)
    assert main([*argv, "--fsdp-version", "fsdp1"]) == 1
    _, err = capsys.readouterr()
    assert "--fsdp-version fsdp1 is not what --use-megatron-fsdp runs" in err
    assert "the file runs a" in err and "not an answer" in err
    out, _ = run(capsys, *argv, "--fsdp-version", "fsdp1", "--emit-anyway")
    assert "--use-megatron-fsdp" in out
    assert "fsdp-version" not in plain and "not an answer" not in plain


def test_emit_for_another_trainer_than_the_planned_one_is_refused_before_the_search(capsys):
    # the plans would be torchtitan's, priced with its behaviour; a Megatron configuration of them is no answer, and
    # the search would have run in full before saying so
    code = main(["search", "llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "8192",
                 "--trainer", "torchtitan", "--emit", "megatron"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--emit megatron with --trainer torchtitan" in err and "--trainer any" in err
