"""Fuzz the real CLI in-process: model YAMLs, Hugging Face config.json files, strategy files/strings, CLI arguments.

Every case must end in exit 2 with exactly ONE stderr line starting `ndcp: error:` (no traceback), or in a valid
result (exit 0/1); never exit 3 (internal error), never a hang. Models stay tiny so a valid fuzzed model is fast.
The case generators are shared with scripts/fuzz_cli.py (the 1,000+ case run).
"""
from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


_SPEC = importlib.util.spec_from_file_location("fuzz_cli", Path(__file__).resolve().parents[1] / "scripts" / "fuzz_cli.py")
fuzz_cli = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("fuzz_cli", fuzz_cli)
_SPEC.loader.exec_module(fuzz_cli)

PROBLEM = ["--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "256"]
FAST = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def run_cli(argv, guard: float = 20.0):
    code, out, err, seconds = fuzz_cli.run_in_process([str(a) for a in argv], guard)
    why = fuzz_cli.problem_with(code, out, err)
    assert why is None, f"{why}\nargv={argv!r:.500}\nstderr={err!r:.500}"
    return code, out, err


# -- values ------------------------------------------------------------------------------------------------------
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 2**70, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e30, -1e30, 1e308, float("nan")]),
    st.text(max_size=12), st.sampled_from(["", "4", "１", "x" * 200, "nan", "\u202e"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


@st.composite
def mutated(draw, base: dict):
    data = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["drop", "set", "set", "nested", "unknown", "replace"]))
        keys = sorted(data) if isinstance(data, dict) else []
        if action == "replace" or not keys:
            return draw(st.one_of(st.lists(values, max_size=3), scalars))
        key = draw(st.sampled_from(keys))
        if action == "drop":
            data.pop(key)
        elif action == "nested" and isinstance(data[key], dict) and data[key]:
            data[key][draw(st.sampled_from(sorted(data[key])))] = draw(values)
        elif action == "unknown":
            data[draw(st.sampled_from(["bogus", "Layers", "rope_scaling", "1"]))] = draw(values)
        else:
            data[key] = draw(values)
    return data


# -- tests -------------------------------------------------------------------------------------------------------
@FAST
@given(data=st.one_of(mutated(fuzz_cli.TINY), mutated(fuzz_cli.TINY_MOE), mutated(fuzz_cli.TINY_MLA)))
def test_model_yaml(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("m") / "model.yaml"
    path.write_bytes(fuzz_cli._yaml_text(data))
    run_cli(["estimate", path, *PROBLEM, "--json", "-"])


@FAST
@given(data=st.sampled_from(sorted(fuzz_cli.HF)).flatmap(lambda k: mutated(fuzz_cli.HF[k])))
def test_hf_config_json(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("hf")
    (folder / "config.json").write_bytes(fuzz_cli._json_text(data))
    run_cli(["estimate", folder / "config.json", *PROBLEM])


@pytest.mark.parametrize("index", range(len(fuzz_cli.RAW_TEXTS)))
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_raw_model_files(tmp_path, index, suffix):
    """Empty files, non-UTF-8 bytes, python tags, anchors/aliases, YAML bombs, 5000-digit ints, deep nesting."""
    path = tmp_path / f"model{suffix}"
    path.write_bytes(fuzz_cli.RAW_TEXTS[index])
    code, _, err = run_cli(["estimate", path, *PROBLEM])
    assert code == 2, err


@pytest.mark.parametrize("index", range(len(fuzz_cli.RAW_TEXTS)))
def test_raw_strategy_files(tmp_path, index):
    path = tmp_path / "plan.yaml"
    path.write_bytes(fuzz_cli.RAW_TEXTS[index])
    run_cli(["estimate", "tiny", *PROBLEM, "--strategy-file", path])


def test_python_tags_are_not_executed(tmp_path, capsys):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.yaml"
    path.write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    code, _, err = run_cli(["estimate", path, *PROBLEM])
    assert code == 2 and not marker.exists()
    assert "invalid YAML" in err


@FAST
@given(text=st.one_of(
    st.text(alphabet=st.sampled_from(list("tpdcemsbnzor=,01234-_ xX")), max_size=30),
    st.lists(st.tuples(st.sampled_from(fuzz_cli.STRATEGY_KEYS), st.one_of(
        st.integers(-5, 2**70).map(str), st.sampled_from(["on", "off", "full", "selective", "nan", "1.5", "", "9" * 5000]))),
        max_size=4).map(lambda kv: ",".join(f"{k}={v}" for k, v in kv))))
def test_strategy_string(text):
    run_cli(["estimate", "tiny", *PROBLEM, "--strategy", text])


@FAST
@given(data=st.dictionaries(st.sampled_from(fuzz_cli.STRATEGY_KEYS), values, max_size=4))
def test_strategy_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("s") / "plan.yaml"
    path.write_bytes(fuzz_cli._yaml_text(data))
    run_cli(["estimate", "tiny", *PROBLEM, "--strategy-file", path])


NUMBERS = st.one_of(st.integers(-(2**70), 2**70).map(str),
                    st.sampled_from(["0", "-1", "1e30", "nan", "inf", "-inf", "9" * 5000, "", " ", "abc", "0x10",
                                     "1e400GB", "1.5TiB", "80000MiB", "1e-300", "٣", "\udcff"]))


@FAST
@given(option=st.sampled_from(["--gpus", "--global-batch", "--seq-len", "--memory-cap", "--reserve", "--device-memory",
                               "--devices-per-node", "--intra-node-bandwidth", "--inter-node-bandwidth", "--device"]),
       value=NUMBERS)
def test_problem_arguments(option, value):
    argv = dict(zip(PROBLEM[::2], PROBLEM[1::2]))
    argv[option] = value
    run_cli(["estimate", "tiny", *[x for kv in argv.items() for x in kv]])


@settings(max_examples=25, deadline=None, derandomize=True)
@given(option=st.sampled_from(["--fix", "--max", "--zero", "--sp", "--recompute", "--max-offset", "--seed",
                               "--workers", "--tp-cp-bound", "--time-limit"]),
       value=st.one_of(NUMBERS, st.sampled_from(["tp=2", "pp=2,tp=1", "zero=4", "sp=on", "dp=0", "tp=" + "9" * 40,
                                                 "0,1", "both", "per-layer", "uniform", "full", "bogus=1"])))
def test_search_arguments(option, value):
    if option == "--time-limit":
        try:
            if not float(value) <= 5:
                value = "5"
        except ValueError:
            pass
    run_cli(["search", "tiny", *PROBLEM, "--time-limit", "5", "--top", "1", "--json", "-", option, value])


def test_random_cases_from_the_script():
    """A seeded slice of the script's generator (models, HF configs, raw files, strategies, CLI args, search)."""
    rng = random.Random(1234)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for i in range(150):
            case = fuzz_cli.generate(rng)
            argv = fuzz_cli.materialise(case, Path(tmp), i)
            code, out, err, _ = fuzz_cli.run_in_process(argv, 20.0)
            assert fuzz_cli.problem_with(code, out, err) is None, case.describe()


def test_error_line_is_bounded_for_alias_bombs(tmp_path):
    """A billion-laughs alias structure is reported in a short line, not expanded."""
    path = tmp_path / "plan.yaml"
    path.write_bytes(fuzz_cli._bomb("tp"))
    code, _, err = run_cli(["estimate", "tiny", *PROBLEM, "--strategy-file", path])
    assert code == 2 and len(err) < 1000


def test_fault_cases_from_the_script(tmp_path):
    """A seeded slice of the script's fault categories (scripts/fuzz_faults.py: hostile files, FIFOs, devices, alias
    bombs, runs files, escapes, a full disk, encodings), in-process and in processes of their own."""
    rng = random.Random(36)
    for i in range(36):
        case = fuzz_cli.fuzz_faults.CATEGORIES[i % len(fuzz_cli.fuzz_faults.CATEGORIES)](rng)  # each one, 6 times
        argv = fuzz_cli.fuzz_faults.materialise(case, tmp_path, i)
        mode = "fault+process" if case.own_process else "fault"
        code, out, err, _ = fuzz_cli._run(mode, case, argv, 30.0)
        assert fuzz_cli.problem_with(code, out, err) is None, case.describe()


@pytest.mark.skipif(sys.platform != "linux", reason="the sweep's fault cases read the Linux process table")
def test_sweep_fault_cases_from_the_script(tmp_path):
    """One case of each of the script's sweep fault categories (scripts/fuzz_sweep.py: corrupt, locked and hostile
    journals, a killed worker, a signalled sweep then resumed)."""
    rng = random.Random(36)
    for i, kind in enumerate(fuzz_cli.fuzz_sweep.KINDS):
        case = fuzz_cli.fuzz_sweep.generate_sweep_fault(rng, kind)
        argv = fuzz_cli.fuzz_sweep.materialise(case, tmp_path, i)
        code, out, err, _ = fuzz_cli._run(f"sweep/{kind}", case, argv, 60.0)
        assert fuzz_cli.problem_with(code, out, err) is None, case.describe()
