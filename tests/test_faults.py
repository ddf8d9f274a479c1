"""Faults a long-running planning job meets (issue #36): hostile input files, hostile values, outputs that fail
half-way, stdout that cannot take the text. Each is one `ndcp: error:` line (exit 2) or a normal answer, never an
internal error (exit 3), a traceback, a hang or a half-written file."""
import errno
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ndcp.cli.common import MAX_ERROR_LENGTH, error_line
from ndcp.specs.fields import SpecError
from ndcp.specs.files import RUNS_CAP, SPEC_CAP, parse_yaml
from tests.cli_helpers import assert_one_line_error, run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512"]
ESC = "\x1b"


@pytest.fixture
def no_hang():
    """Fail (instead of hanging the suite) when a read blocks: a FIFO opened for reading waits for a writer."""
    def timed_out(signum, frame):
        raise TimeoutError("blocked")
    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    """A YAML document of a few hundred bytes whose aliases expand to width**levels nodes."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def ndcp_process(*args, env=None, stdout=subprocess.PIPE):
    """`python -m ndcp ARGS` in a process of its own (real file descriptors for stdout)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "ndcp", *args], env=environment, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120)


# -- internal errors on user input (exit 3 before) -----------------------------------------------------------------
def test_recompute_offload_searches_offload_plans(capsys):
    code, out, err = run(capsys, "search", *TINY, "--recompute", "offload", "--json", "-")
    assert code == 0, err
    assert json.loads(out)["strategies"][0]["strategy"]["recompute"] == "offload"


@pytest.mark.parametrize("text, words", [
    ("runs: [1, 2, 3]\n", ["runs[0]", "expected a mapping of run fields", "int 1"]),
    ("runs: [{id: x, model: 5, cluster: 7}]\n", ["runs[0].model", "expected a mapping of model fields", "int 5"]),
    ("hardware: 5\nruns: []\n", ["hardware", "expected a list", "int 5"]),
    ("hardware: [5, null]\nruns: []\n", ["hardware[0]", "int 5"]),
])
def test_a_runs_file_of_another_shape_names_the_place(capsys, tmp_path, text, words):
    path = tmp_path / "runs.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "validate", path)
    assert_one_line_error(code, out, err, *words)
    code, out, err = run(capsys, "calibrate", path, "--device", "h100", "--output", tmp_path / "fitted.yaml")
    assert_one_line_error(code, out, err, *words)
    assert not (tmp_path / "fitted.yaml").exists()


QWEN2_VL = {"model_type": "qwen2_vl", "hidden_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 12,
            "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936,
            "vision_config": {"depth": 2, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 1536,
                              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}}
LLAVA = {"model_type": "llava",
         "text_config": {"model_type": ["llama"], "hidden_size": 4096, "num_hidden_layers": 4,
                         "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000},
         "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "num_hidden_layers": 24,
                           "num_attention_heads": 16, "intermediate_size": 4096, "image_size": 336, "patch_size": 14}}
QWEN2_WINDOWS = {"model_type": "qwen2", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 16,
                 "intermediate_size": 4096, "vocab_size": 32000, "sliding_window": 4096, "use_sliding_window": True,
                 "layer_types": [{"a": 1}, {"b": 2}]}


@pytest.mark.parametrize("config, words", [
    (LLAVA, ["text_config.model_type=['llama']", "expected a model type name"]),
    ({**QWEN2_VL, "vision_config": {**QWEN2_VL["vision_config"], "mlp_ratio": 1e308}},
     ["vision_config.mlp_ratio=1e+308", "at most"]),
    ({**QWEN2_VL, "vision_config": {**QWEN2_VL["vision_config"], "mlp_ratio": float("nan")}},
     ["vision_config.mlp_ratio=nan", "expected a finite number"]),
    (QWEN2_WINDOWS, ["layer_types=", "'sliding_attention' or 'full_attention'"]),
])
def test_a_hugging_face_config_with_a_hostile_value_names_the_key(capsys, tmp_path, config, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))  # NaN as JSON's NaN, as Python's json writes and reads it
    code, out, err = run(capsys, "estimate", path, *TINY[1:])
    assert_one_line_error(code, out, err, *words)


def test_the_qwen2_vl_config_those_start_from_reads(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN2_VL))
    code, out, err = run(capsys, "estimate", path, *TINY[1:], "--quiet")
    assert code == 0, err


# -- bounded input -------------------------------------------------------------------------------------------------
def _problem_with(tmp_path: Path, where: str, path: Path) -> list:
    """The estimate arguments with `path` as the model, the device, the strategy file or the trainer file."""
    args = {"model": [path, *TINY[1:]], "device": ["tiny", "--device", path, *TINY[3:]],
            "strategy-file": [*TINY, "--strategy-file", path], "strategy-from": [*TINY, "--strategy-from", path]}
    return ["estimate", *args[where]]


WHERE = ("model", "device", "strategy-file", "strategy-from")


@pytest.mark.parametrize("where", WHERE)
def test_a_fifo_is_refused_without_blocking(capsys, tmp_path, no_hang, where):
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    code, out, err = run(capsys, *_problem_with(tmp_path, where, fifo))
    assert_one_line_error(code, out, err, "is a FIFO, not a regular file")


@pytest.mark.parametrize("where", WHERE)
def test_a_character_device_is_refused_before_reading(capsys, tmp_path, where):
    code, out, err = run(capsys, *_problem_with(tmp_path, where, Path("/dev/zero")))
    assert_one_line_error(code, out, err, "/dev/zero", "is a character device, not a regular file")


def test_a_fifo_as_the_runs_file_is_refused(capsys, tmp_path, no_hang):
    fifo = tmp_path / "runs.yaml"
    os.mkfifo(fifo)
    code, out, err = run(capsys, "validate", fifo)
    assert_one_line_error(code, out, err, "is a FIFO, not a regular file")


@pytest.mark.parametrize("where", WHERE)
def test_a_file_over_the_cap_is_refused_unread(capsys, tmp_path, where):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as stream:
        stream.truncate(SPEC_CAP + 1)  # sparse: no disk used
    code, out, err = run(capsys, *_problem_with(tmp_path, where, huge))
    assert_one_line_error(code, out, err, "larger than 16 MiB")


def test_runs_files_take_more_than_specs(capsys, tmp_path):
    huge = tmp_path / "runs.csv"
    with open(huge, "wb") as stream:
        stream.truncate(SPEC_CAP + 1)
    code, out, err = run(capsys, "validate", huge)
    assert_one_line_error(code, out, err, "not a readable CSV")  # read, and refused for what it holds
    with open(huge, "wb") as stream:
        stream.truncate(RUNS_CAP + 1)
    code, out, err = run(capsys, "validate", huge)
    assert_one_line_error(code, out, err, "larger than 64 MiB")


@pytest.mark.parametrize("where", WHERE)
def test_an_alias_bomb_is_refused_fast_in_every_yaml(capsys, tmp_path, where):
    bomb = tmp_path / "bomb.yaml"
    uses = {"device": "base: *a8\n", "strategy-from": "parallel_config: *a8\n"}  # what its reader walks
    bomb.write_text(alias_bomb() + uses.get(where, ""))
    code, out, err = run(capsys, *_problem_with(tmp_path, where, bomb))
    assert code == 2 and "aliases expand to more than" in err, err


def test_an_alias_bomb_in_a_runs_file_is_refused(capsys, tmp_path):
    bomb = tmp_path / "runs.yaml"
    bomb.write_text(alias_bomb() + "runs: *a8\n")
    code, out, err = run(capsys, "validate", bomb)
    assert_one_line_error(code, out, err, "aliases expand to more than")


def test_the_loader_counts_aliases_once_per_use():
    assert parse_yaml(alias_bomb(levels=3), "x")["a2"][9][9][9] == "x"  # 1,000 nodes: within the budget
    with pytest.raises(SpecError, match="self-referencing"):
        parse_yaml("a: &a [*a]\n", "x")


def test_error_lines_are_capped_with_their_start_and_end_kept():
    line = error_line("field=" + "x" * 10_000 + " is not valid; expected one of a, b")
    assert len(line) <= MAX_ERROR_LENGTH
    assert line.startswith("field=xxx") and line.endswith("expected one of a, b") and " ... " in line


def test_a_huge_model_name_gives_a_short_line(capsys):
    code, out, err = run(capsys, "estimate", "x" * 100_000, *TINY[1:])
    assert code == 2 and len(err.strip()) <= MAX_ERROR_LENGTH + len("ndcp: error: ")


# -- outputs: whole or not at all ----------------------------------------------------------------------------------
def _old_files(tmp_path: Path) -> tuple[Path, Path]:
    json_path, csv_path = tmp_path / "out.json", tmp_path / "out.csv"
    json_path.write_text("old json\n")
    csv_path.write_text("old csv\n")
    return json_path, csv_path


def _leftovers(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if p.name.endswith(".ndcp-tmp")]


def test_a_full_disk_keeps_the_old_file(capsys, tmp_path, monkeypatch):
    json_path, _ = _old_files(tmp_path)

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    code, out, err = run(capsys, "search", *TINY, "--quiet", "--json", json_path)
    assert_one_line_error(code, out, err, f"--json {json_path}: cannot write: No space left on device")
    assert json_path.read_text() == "old json\n" and not _leftovers(tmp_path)


def test_one_failed_output_leaves_every_output_as_it_was(capsys, tmp_path):
    json_path, csv_path = _old_files(tmp_path)
    (tmp_path / "a-directory").mkdir()
    code, out, err = run(capsys, "search", *TINY, "--quiet", "--csv", csv_path, "--json", tmp_path / "a-directory")
    assert_one_line_error(code, out, err, "--json", "Is a directory")
    assert csv_path.read_text() == "old csv\n" and not _leftovers(tmp_path)


def test_ctrl_c_while_writing_leaves_every_output_as_it_was(capsys, tmp_path, monkeypatch):
    json_path, csv_path = _old_files(tmp_path)

    def interrupted(doc, path):
        raise KeyboardInterrupt
    monkeypatch.setattr("ndcp.cli.outputs.write_json", interrupted)  # after the CSV was written
    run(capsys, "search", *TINY, "--quiet", "--csv", csv_path, "--json", json_path)
    assert csv_path.read_text() == "old csv\n" and json_path.read_text() == "old json\n"
    assert not _leftovers(tmp_path)


def test_outputs_replace_the_old_files_together_with_their_permissions(capsys, tmp_path):
    json_path, csv_path = _old_files(tmp_path)
    os.chmod(json_path, 0o640)
    code, out, err = run(capsys, "search", *TINY, "--quiet", "--csv", csv_path, "--json", json_path)
    assert code == 0, err
    assert json.loads(json_path.read_text())["status"] == "optimal" and csv_path.read_text().startswith("rank")
    assert stat.S_IMODE(os.stat(json_path).st_mode) == 0o640 and not _leftovers(tmp_path)


def test_a_device_as_the_output_is_written_in_place(capsys):
    code, out, err = run(capsys, "search", *TINY, "--quiet", "--json", os.devnull)
    assert code == 0, err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # /dev/null is still the device, not a renamed file


def test_a_fifo_no_one_reads_is_refused_as_an_output(capsys, tmp_path, no_hang):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    code, out, err = run(capsys, "search", *TINY, "--quiet", "--json", fifo)
    assert_one_line_error(code, out, err, "--json", "a FIFO that no process reads")


@pytest.mark.parametrize("journal, words", [("fifo", "a FIFO that no process reads"),
                                            ("/dev/full", "is a character device, not a regular file")])
def test_a_journal_that_is_no_file_is_refused_on_resume(capsys, tmp_path, no_hang, journal, words):
    if journal == "fifo":
        journal = tmp_path / "sweep.jsonl"
        os.mkfifo(journal)
    code, out, err = run(capsys, "sweep", *TINY, "--tokens", "1T", "--jsonl", journal, "--resume", "--workers", "1")
    assert_one_line_error(code, out, err, "--jsonl", words)


def test_a_symbolic_link_keeps_pointing_at_the_new_file(capsys, tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old\n")
    link.symlink_to(real.name)
    code, out, err = run(capsys, "search", *TINY, "--quiet", "--json", link)
    assert code == 0, err
    assert link.is_symlink() and json.loads(real.read_text())["status"] == "optimal"


def test_a_full_stdout_is_a_user_error():
    with open("/dev/full", "w") as full:
        done = ndcp_process("search", *TINY, stdout=full)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "ndcp: error: stdout: cannot write: No space left on device"


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}])
def test_reports_print_under_an_encoding_without_mu(env):
    done = ndcp_process("search", *TINY, env=env)
    assert done.returncode == 0, done.stderr
    assert " us" in done.stdout and "?" not in done.stdout.replace("?)", "")


# -- messages ------------------------------------------------------------------------------------------------------
def test_a_bad_megatron_value_is_one_line_without_a_usage_block(capsys, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("pretrain_gpt.py --tensor-model-parallel-size abc --micro-batch-size 1\n")
    code, out, err = run(capsys, "estimate", *TINY, "--strategy-from", script)
    assert_one_line_error(code, out, err, "--tensor-model-parallel-size", "invalid int value: 'abc'")


def test_control_characters_in_a_device_name_are_escaped(capsys, tmp_path):
    device = tmp_path / "evil.yaml"
    device.write_text('base: h100\nname: "ev\\e[2Jil"\n')
    code, out, err = run(capsys, "estimate", "tiny", "--device", device, *TINY[3:])
    assert code == 0, err
    assert ESC not in out and "ev\\x1b[2Jil" in out


def test_control_characters_in_a_run_id_are_escaped(capsys, tmp_path):
    runs = tmp_path / "runs.csv"
    runs.write_text(f'id,model,device,gpus,global_batch,seq_len,tp,pp,dp,step_seconds\n"ev{ESC}[2Jil",tiny,h100,8,'
                    '32,1024,1,1,8,0.01\n')
    code, out, err = run(capsys, "validate", runs)
    assert ESC not in out + err and "ev\\x1b[2Jil" in out


def test_control_characters_in_an_error_are_escaped(capsys):
    code, out, err = run(capsys, "estimate", f"no{ESC}]0;title{chr(7)}model", *TINY[1:])
    assert code == 2 and ESC not in err and chr(7) not in err and "\\x1b]0;title\\x07" in err


@pytest.mark.parametrize("option", ["--json", "--csv", "--plot", "--emit-file"])
def test_an_empty_output_path_is_refused(capsys, option):
    code, out, err = run(capsys, "search", *TINY, "--emit", "megatron", option, "")
    assert_one_line_error(code, out, err, f"argument {option}: '' is an empty path")


def test_an_empty_journal_path_is_refused(capsys):
    code, out, err = run(capsys, "sweep", *TINY, "--tokens", "1T", "--jsonl", " ")
    assert_one_line_error(code, out, err, "argument --jsonl: ' ' is an empty path")


def test_bits_are_not_read_as_bytes(capsys):
    code, out, err = run(capsys, "estimate", *TINY, "--memory-cap", "70Gb")
    assert_one_line_error(code, out, err, "Gb reads as bits", "70GB", "70GiB")


def test_a_negative_value_says_what_is_wrong_with_it(capsys):
    code, out, err = run(capsys, "estimate", *TINY, "--memory-cap", "-1GiB")
    assert_one_line_error(code, out, err, "argument --memory-cap: invalid size '-1GiB'")


@pytest.mark.parametrize("option, value, words", [
    ("--global-batch", "x", ["argument --global-batch: 'x' is not valid", "e.g. 512,1024"]),
    ("--gpus", "0", ["argument --gpus: '0' is not valid", "GPU counts of at least 1", "256,512,1024"]),
])
def test_sweep_messages_name_their_option_once_with_its_own_hint(capsys, option, value, words):
    args = list(TINY)
    args[args.index(option) + 1] = value
    code, out, err = run(capsys, "sweep", *args, "--tokens", "1T")
    assert_one_line_error(code, out, err, *words)
    assert err.count(option) == 1 and "15T" not in err
