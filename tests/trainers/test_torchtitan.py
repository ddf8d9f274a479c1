"""torchtitan 0.3.0 arguments: two model parts per rank for DualPipe-V, FSDP over the CP ranks read back as
ZeRO-3, FP8 through the registry configs that carry a converter (llama3_405b, llama3_8b_mxfp8,
deepseek_v3_671b_float8), torch.compile as the run states it (compile.components: the blocks with --torch-compile,
the loss with --compile-loss, each read back; compile off where a pinned config would compile an eager plan), and
the user's settings as placeholders before the activation-checkpoint subcommand."""
import dataclasses
import shlex

import pytest

from ndcp.cli.common import build_strategy
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, Strategy, device_preset
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.trainers import emit, read_values
from ndcp.trainers.torchtitan import PLACEHOLDERS, model_parts

FULL = RecomputePlan.uniform("full")
LLAMA70, LLAMA405 = load_model("llama3-70b"), load_model("llama3.1-405b")
TITAN = RunSpec(global_batch=256, seq_len=8192, trainer="torchtitan")


def tokens(text: str) -> list[str]:
    return shlex.split(text.replace("\\\n", " "), comments=True)


def values(text: str, option: str) -> list[str]:
    t = tokens(text)
    i = t.index(option) + 1
    out = []
    while i < len(t) and not t[i].startswith("--") and ":" not in t[i]:
        out.append(t[i])
        i += 1
    return out


@pytest.mark.parametrize("layers_per_stage", [(), (19, 21, 21, 19)])
def test_dualpipev_runs_two_model_parts_per_rank_in_a_v(tmp_path, layers_per_stage):
    strategy = Strategy(dp=4, tp=8, pp=4, schedule="dualpipev", mbs=1, mbn=64, zero=3, sp=True, recompute=FULL,
                        layers_per_stage=layers_per_stage)
    counts = layers_per_stage or (20,) * 4
    parts = model_parts(LLAMA70, strategy)
    assert len(parts) == 8 and [parts[r] + parts[-1 - r] for r in range(4)] == list(counts)
    emitted = emit("torchtitan", LLAMA70, TITAN, strategy)
    assert emitted.same_as_plan
    fqns = values(emitted.text, "--parallelism.module-fqns-per-model-part")
    assert len(fqns) == 8 and fqns[0].startswith("tok_embeddings,") and fqns[-1].endswith(",norm,lm_head")
    path = tmp_path / "titan.sh"
    path.write_text(emitted.text)
    back = read_values(str(path), LLAMA70, TITAN)
    assert back.get("vpp", 1) == 1 and back["schedule"] == "dualpipev"
    assert tuple(back.get("layers_per_stage", counts)) == counts


def test_fsdp_over_the_cp_ranks_with_data_parallelism_1_reads_back_as_zero_3(tmp_path):
    run = RunSpec(global_batch=8, seq_len=65536, trainer="torchtitan")
    strategy = Strategy(dp=1, tp=2, cp=4, mbs=1, mbn=8, zero=3, sp=True, recompute=FULL)
    text = emit("torchtitan", load_model("llama3-8b"), run, strategy).text
    assert values(text, "--parallelism.data-parallel-shard-degree") == ["1"]
    path = tmp_path / "titan.sh"
    path.write_text(text)
    assert read_values(str(path), load_model("llama3-8b"), run)["zero"] == 3


def test_fp8_runs_the_registry_config_with_a_converter_and_reads_back_as_fp8(tmp_path):
    run = RunSpec(global_batch=2048, seq_len=8192, trainer="torchtitan", precision="fp8", fp8_recipe="blockwise")
    strategy = Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, zero=3, sp=True, recompute=FULL)
    emitted = emit("torchtitan", LLAMA405, run, strategy)
    assert values(emitted.text, "--config") == ["llama3_405b"] and emitted.same_as_plan
    assert "--compile.no-enable-async-tensor-parallel" in tokens(emitted.text)  # no TP overlap planned
    assert any("compiles the model" in n for n in emitted.notes)
    path = tmp_path / "titan.sh"
    path.write_text(emitted.text)
    back = read_values(str(path), LLAMA405, run)
    assert (back["precision"], back["fp8_recipe"]) == ("fp8", "blockwise")


def test_a_bf16_405b_plan_names_the_fp8_config_torchtitan_has():
    strategy = Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, zero=3, sp=True, recompute=FULL)
    emitted = emit("torchtitan", LLAMA405, RunSpec(global_batch=2048, seq_len=8192, trainer="torchtitan"), strategy)
    assert values(emitted.text, "--config") == ["CONFIG"]
    assert any("no BF16 registry config for llama3.1-405b (llama3_405b trains it in another precision)" in n
               for n in emitted.missing)


def test_the_users_settings_are_placeholders_before_the_subcommand():
    text = emit("torchtitan", LLAMA70, TITAN, Strategy(dp=4, tp=8, pp=2, mbs=1, mbn=64, zero=3, sp=True,
                                                       recompute=FULL)).text
    t = tokens(text)
    assert t[-1] == "activation-checkpoint:full"
    tail = t[-1 - 2 * len(PLACEHOLDERS):-1]
    assert list(zip(tail[::2], tail[1::2])) == [(p.option, p.value) for p in PLACEHOLDERS]
    assert {"--hf-assets-path", "--training.steps", "--checkpoint.folder"} <= {p.option for p in PLACEHOLDERS}
    assert "fixes the model's architecture" in text


SELECTIVE = RecomputePlan.uniform("selective")
COMPILED = dataclasses.replace(TITAN, torch_compile=True)


def _read_back(tmp_path, run, emitted):
    """(the file, the 256-GPU cluster, the strategy read back) of a Llama-3-70B file emitted for `run`."""
    path = tmp_path / "titan.sh"
    path.write_text(emitted.text)
    cluster = ClusterSpec(device_preset("h100"), 256)
    return path, cluster, build_strategy(LLAMA70, cluster, run, read_values(str(path), LLAMA70, run))


def test_a_compiled_plan_compiles_the_blocks_and_reads_back_as_the_same_estimate(tmp_path):
    """--compile.enable with components [model] only: the loss stays eager, as ndcp prices its fp32 logits."""
    strategy = Strategy(dp=32, tp=8, mbs=1, mbn=8, zero=3, sp=True, recompute=SELECTIVE)
    emitted = emit("torchtitan", LLAMA70, COMPILED, strategy)
    assert emitted.same_as_plan and "--compile.enable" in tokens(emitted.text)
    assert values(emitted.text, "--compile.components") == ["model"]
    path, cluster, back = _read_back(tmp_path, COMPILED, emitted)
    assert back == strategy
    assert estimate_time(LLAMA70, cluster, COMPILED, back).step_seconds == \
        estimate_time(LLAMA70, cluster, COMPILED, strategy).step_seconds
    assert estimate_memory(LLAMA70, cluster, COMPILED, back).peak_bytes == \
        estimate_memory(LLAMA70, cluster, COMPILED, strategy).peak_bytes
    with pytest.raises(SpecError, match="give --torch-compile"):
        read_values(str(path), LLAMA70, TITAN)


def test_an_eager_plan_turns_off_the_compile_a_pinned_config_runs_and_says_so(tmp_path):
    run = RunSpec(global_batch=2048, seq_len=8192, trainer="torchtitan", precision="fp8", fp8_recipe="blockwise")
    strategy = Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, zero=3, sp=True, recompute=FULL)
    emitted = emit("torchtitan", LLAMA405, run, strategy)
    assert "--compile.no-enable" in tokens(emitted.text)
    assert any("emitted --compile.no-enable" in n for n in emitted.notes)
    path = tmp_path / "titan.sh"
    path.write_text(emitted.text)
    read_values(str(path), LLAMA405, run)  # eager, as the run
    compiled = dataclasses.replace(run, torch_compile=True)
    assert "--compile.no-enable" not in tokens(emit("torchtitan", LLAMA405, compiled, strategy).text)


def test_a_registry_config_reads_as_the_components_it_compiles(tmp_path):
    """llama3_405b pins compile.enable with the default components [model, loss]: the blocks and the loss;
    deepseek_v3_671b compiles the loss only (facts/torchtitan.yaml)."""
    path = tmp_path / "titan.sh"
    path.write_text("--module llama3 --config llama3_405b --training.global-batch-size 2048")
    run = RunSpec(global_batch=2048, seq_len=8192, trainer="torchtitan", precision="fp8", fp8_recipe="blockwise")
    with pytest.raises(SpecError, match="compiles the model .*give --torch-compile"):
        read_values(str(path), LLAMA405, run)
    with pytest.raises(SpecError, match="compiles the loss .*give --compile-loss"):
        read_values(str(path), LLAMA405, dataclasses.replace(run, torch_compile=True))
    both = dataclasses.replace(run, torch_compile=True, compile_loss=True)
    assert not {"torch_compile", "compile_loss"} & set(read_values(str(path), LLAMA405, both))
    path.write_text("--module deepseek_v3 --config deepseek_v3_671b --training.global-batch-size 4096")
    deepseek = RunSpec(global_batch=4096, seq_len=4096, trainer="torchtitan")
    with pytest.raises(SpecError, match="give --compile-loss"):
        read_values(str(path), load_model("deepseek-v3"), deepseek)
    read_values(str(path), load_model("deepseek-v3"), dataclasses.replace(deepseek, compile_loss=True))


def test_a_plan_that_compiles_the_loss_emits_both_components_and_reads_back_as_the_same_estimate(tmp_path):
    """--torch-compile --compile-loss: compile.components model,loss (torchtitan's default, what the Trainy 8B
    rows' --training.compile ran at e7c0cae), read back as the same run and the same estimate; a file that
    compiles the model alone refuses a run that says the loss is compiled."""
    both = dataclasses.replace(COMPILED, compile_loss=True)
    strategy = Strategy(dp=32, tp=8, mbs=1, mbn=8, zero=3, sp=True, recompute=SELECTIVE)
    emitted = emit("torchtitan", LLAMA70, both, strategy)
    assert emitted.same_as_plan and values(emitted.text, "--compile.components") == ["model,loss"]
    path, cluster, back = _read_back(tmp_path, both, emitted)
    assert back == strategy
    assert estimate_memory(LLAMA70, cluster, both, back).peak_bytes == \
        estimate_memory(LLAMA70, cluster, both, strategy).peak_bytes
    assert estimate_memory(LLAMA70, cluster, both, back).peak_bytes < \
        estimate_memory(LLAMA70, cluster, COMPILED, strategy).peak_bytes
    with pytest.raises(SpecError, match="runs the loss eager.*leave out --compile-loss"):
        path.write_text(emit("torchtitan", LLAMA70, COMPILED, strategy).text)
        read_values(str(path), LLAMA70, both)


def test_a_loss_only_plan_compiles_the_loss_alone_and_an_eager_plan_turns_off_a_pinned_loss_compile():
    """compile.components [loss] (deepseek_v3_671b's own setting) for a plan that compiles only the loss; an eager
    plan on that config gets --compile.no-enable and a note naming --compile-loss."""
    run = RunSpec(global_batch=4096, seq_len=4096, trainer="torchtitan")
    strategy = Strategy(dp=64, ep=8, pp=8, mbs=1, mbn=8, zero=3, recompute=SELECTIVE)
    deepseek = load_model("deepseek-v3")
    loss_only = emit("torchtitan", deepseek, dataclasses.replace(run, compile_loss=True), strategy)
    assert values(loss_only.text, "--compile.components") == ["loss"]
    eager = emit("torchtitan", deepseek, run, strategy)
    assert "--compile.no-enable" in tokens(eager.text)
    assert any("compiles the loss" in n and "--compile-loss" in n for n in eager.notes)


def test_a_separate_qkv_run_is_emitted_with_the_fused_projection_0_3_0_runs():
    """torchtitan 0.3.0 has one wqkv (models/common/attention.py FusedQKVLinear): a run priced with separate wq, wk,
    wv (the code measured rows ran) is emitted as 0.3.0 runs it, the emitted run fused and said so."""
    run = dataclasses.replace(TITAN, qkv_projections="separate")
    strategy = Strategy(dp=32, tp=8, mbs=1, mbn=8, zero=3, sp=True, recompute=FULL)
    emitted = emit("torchtitan", LLAMA70, run, strategy)
    assert emitted.run == dataclasses.replace(run, qkv_projections="fused")
    assert any("FusedQKVLinear" in note for note in emitted.notes)
