"""Emit -> --strategy-from -> the same strategy and the same estimate, for every trainer: a launch script ndcp wrote
reads back as the plan the trainer runs (the nearest it can express), and so estimates exactly as that plan does."""
import dataclasses
import shlex

import pytest

from ndcp.cli.common import build_strategy
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, StageRecompute, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.trainers import emit, nearest, read_values, stage_plans

H100 = device_preset("h100")
LLAMA70 = load_model("llama3-70b")
LLAMA405 = load_model("llama3.1-405b")
MIXTRAL = load_model("mixtral-8x7b")
DEEPSEEK = load_model("deepseek-v3")
LLAMA8 = load_model("llama3-8b")
FULL, SELECTIVE = RecomputePlan.uniform("full"), RecomputePlan.uniform("selective")


def round_trip(tmp_path, kind, model, gpus, run, strategy):
    """(the strategy the trainer runs, the strategy read back from its emitted configuration)."""
    cluster = ClusterSpec(H100, gpus)
    path = tmp_path / f"{kind}.txt"
    path.write_text(emit(kind, model, run, strategy).text)
    back = build_strategy(model, cluster, run, read_values(str(path), model, run))
    ran, _ = nearest(kind, model, run, strategy)
    return cluster, ran, back


def same_estimate(model, cluster, run, a, b):
    assert estimate_time(model, cluster, run, a).step_seconds == estimate_time(model, cluster, run, b).step_seconds
    assert estimate_memory(model, cluster, run, a).peak_bytes == estimate_memory(model, cluster, run, b).peak_bytes


BLOCK = RecomputePlan(mode="per-stage", stages=tuple(StageRecompute(none=18, full=2) for _ in range(4)))
MEGATRON_CASES = [  # (model, gpus, run, strategy)
    (LLAMA70, 512, RunSpec(global_batch=1024, seq_len=8192),
     Strategy(dp=64, tp=8, mbs=2, mbn=8, zero=2, sp=True)),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=BLOCK)),
    (LLAMA405, 2048, RunSpec(global_batch=2048, seq_len=8192),  # uneven: Megatron's layout notation
     Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, sp=True, recompute=SELECTIVE,
              layers_per_stage=(6,) + (8,) * 15)),
    (LLAMA405, 2048, RunSpec(global_batch=2048, seq_len=8192),  # embedding+loss accounted, interleaved
     Strategy(dp=32, tp=8, pp=8, vpp=8, schedule="interleaved", mbs=1, mbn=64, sp=True, recompute=SELECTIVE)),
    (MIXTRAL, 64, RunSpec(global_batch=256, seq_len=4096),  # Megatron FSDP: no pipeline stages
     Strategy(dp=32, tp=2, pp=1, ep=8, etp=2, mbs=1, mbn=8, zero=3, sp=True, recompute=FULL)),
    (DEEPSEEK, 1024, RunSpec(global_batch=4096, seq_len=4096),
     Strategy(dp=32, tp=2, pp=16, ep=64, mbs=1, mbn=128, sp=True, recompute=FULL)),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192, precision="fp8", fp8_recipe="tensorwise"),
     Strategy(dp=4, tp=4, pp=4, mbs=1, mbn=32, sp=True, recompute=SELECTIVE)),
    (LLAMA70, 128, RunSpec(global_batch=128, seq_len=32768),
     Strategy(dp=8, tp=4, cp=4, cp_comm="a2a+p2p", mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    # HSDP: Megatron FSDP in 8 instances (--num-distributed-optimizer-instances 8) of 8 ranks
    (LLAMA8, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=64, dp_shard=8, mbs=1, mbn=2, zero=3, recompute=FULL)),
    # the optimizer on the host (--optimizer-cpu-offload), under ZeRO-1 and plain DDP
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=SELECTIVE, optimizer_offload=True)),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192, optimizer_state_dtype="bf16"),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=0, sp=True, recompute=FULL, optimizer_offload=True)),
    # activation offload (--fine-grained-activation-offloading) and a recompute-module combination
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("offload"))),
    (DEEPSEEK, 1024, RunSpec(global_batch=4096, seq_len=4096),  # DeepSeek-V3 §3.3's modules
     Strategy(dp=32, tp=2, pp=16, ep=64, mbs=1, mbn=128, sp=True,
              recompute=RecomputePlan.uniform("layernorm+mla_up_proj+moe_act"))),
]


@pytest.mark.parametrize("model,gpus,run,strategy", MEGATRON_CASES)
def test_megatron_arguments_read_back_as_the_plan(tmp_path, model, gpus, run, strategy):
    cluster, ran, back = round_trip(tmp_path, "megatron", model, gpus, run, strategy)
    assert ran == strategy  # Megatron expresses each of these exactly
    assert back == strategy
    same_estimate(model, cluster, run, strategy, back)


TITAN = RunSpec(global_batch=256, seq_len=8192, trainer="torchtitan")


@pytest.mark.parametrize("model,strategy", [
    (LLAMA8, Strategy(dp=64, mbs=2, mbn=2, zero=3, recompute=SELECTIVE)),
    (LLAMA8, Strategy(dp=64, mbs=1, mbn=4, zero=0)),  # DDP: data parallelism alone
    (LLAMA70, Strategy(dp=4, tp=8, pp=2, mbs=1, mbn=64, zero=3, sp=True, recompute=FULL,
                       layers_per_stage=(38, 42))),
    (LLAMA70, Strategy(dp=2, tp=4, pp=4, cp=2, vpp=2, schedule="interleaved", mbs=1, mbn=128, zero=3, sp=True,
                       recompute=SELECTIVE)),
    # HSDP: --parallelism.data-parallel-shard-degree 8 x data-parallel-replicate-degree 8, and with CP
    (LLAMA8, Strategy(dp=64, dp_shard=8, mbs=2, mbn=2, zero=3, recompute=SELECTIVE)),
    (LLAMA8, Strategy(dp=32, cp=2, dp_shard=4, mbs=1, mbn=8, zero=3, recompute=FULL)),
])
def test_torchtitan_arguments_read_back_as_the_plan(tmp_path, model, strategy):
    cluster, ran, back = round_trip(tmp_path, "torchtitan", model, 64, TITAN, strategy)
    assert ran == strategy and back == strategy
    same_estimate(model, cluster, TITAN, strategy, back)


def test_torchtitan_hsdp_arguments_name_both_degrees():
    text = emit("torchtitan", LLAMA8, TITAN, Strategy(dp=64, dp_shard=8, mbs=2, mbn=2, zero=3)).text
    assert "--parallelism.data-parallel-replicate-degree 8" in text
    assert "--parallelism.data-parallel-shard-degree 8" in text


def test_torchtitan_reads_back_the_nearest_plan_it_runs(tmp_path):
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=30, full=10), StageRecompute(none=40)))
    strategy = Strategy(dp=4, tp=8, pp=2, mbs=1, mbn=64, zero=1, sp=True, recompute=plan)
    cluster, ran, back = round_trip(tmp_path, "torchtitan", LLAMA70, 64, TITAN, strategy)
    assert (ran.zero, ran.recompute) == (3, FULL)  # FSDP2 and full AC on every block
    assert back == ran
    same_estimate(LLAMA70, cluster, TITAN, ran, back)


@pytest.mark.parametrize("model,gpus,strategy", [
    (LLAMA70, 64, Strategy(dp=2, tp=8, pp=4, vpp=2, schedule="interleaved", mbs=1, mbn=64, zero=3, sp=True,
                           recompute=RecomputePlan(mode="per-stage", stages=tuple(
                               StageRecompute(none=10 - v % 3, selective=v % 3) for v in range(7)) + (
                               StageRecompute(none=7, full=3),)))),
    (MIXTRAL, 64, Strategy(dp=16, tp=2, pp=2, ep=8, etp=1, mbs=1, mbn=8, zero=0, sp=True, recompute=SELECTIVE,
                           layers_per_stage=(15, 17))),
    (LLAMA70, 128, Strategy(dp=16, tp=2, cp=4, cp_comm="a2a", mbs=1, mbn=4, zero=3, sp=True, recompute=FULL)),
])
def test_mindformers_yaml_reads_back_as_the_plan(tmp_path, model, gpus, strategy):
    # MindFormers' select sets are not ndcp's selective (they re-run the SwiGLU activation): selective layers are
    # emitted fully recomputed, and the YAML reads back as what MindFormers runs
    run = RunSpec(global_batch=strategy.global_batch, seq_len=8192, trainer="mindformers")
    cluster, ran, back = round_trip(tmp_path, "mindformers", model, gpus, run, strategy)
    selective = any(p.count("selective") for p in stage_plans(model, strategy))
    assert (ran == strategy) == (not selective)
    assert not any(p.count("selective") for p in stage_plans(model, ran))
    assert back == ran
    same_estimate(model, cluster, run, ran, back)


def test_a_file_for_another_batch_or_model_is_refused(tmp_path):
    run = RunSpec(global_batch=1024, seq_len=8192)
    path = tmp_path / "m.sh"
    path.write_text(emit("megatron", LLAMA70, run, MEGATRON_CASES[0][3]).text)
    with pytest.raises(SpecError, match="global batch is 1024, the run's --global-batch is 512"):
        read_values(str(path), LLAMA70, RunSpec(global_batch=512, seq_len=8192))
    with pytest.raises(SpecError, match="--num-layers 80 does not match llama3-8b"):
        read_values(str(path), LLAMA8, run)
    path.write_text("echo hello\n")
    with pytest.raises(SpecError, match="cannot tell the trainer"):
        read_values(str(path), LLAMA70, run)


def test_megatron_hsdp_that_shards_the_outer_group_too_is_refused(tmp_path):
    """ndcp prices Megatron FSDP's HSDP with the outer (inter-instance) group replicated, the pinned default
    --outer-dp-sharding-strategy no_shard; `optim` would also shard the optimizer states across instances."""
    run, path = RunSpec(global_batch=128, seq_len=8192), tmp_path / "m.sh"
    text = emit("megatron", LLAMA8, run, Strategy(dp=64, dp_shard=8, mbs=1, mbn=2, zero=3, recompute=FULL)).text
    path.write_text(text.replace("--outer-dp-sharding-strategy no_shard", "--outer-dp-sharding-strategy optim"))
    with pytest.raises(SpecError, match="replicated .--outer-dp-sharding-strategy no_shard. only"):
        read_values(str(path), LLAMA8, run)


MF_RUN = RunSpec(global_batch=128, seq_len=8192, trainer="mindformers")
MF_SELECT = RecomputePlan(mode="per-stage", stages=tuple(  # pp=4, vpp=2 over 80 layers: 10 per virtual stage
    StageRecompute(none=10 - v % 4 - v % 3, mlp_act=v % 4, full=v % 3) for v in range(8)))


@pytest.mark.parametrize("strategy", [
    Strategy(dp=2, tp=8, pp=4, vpp=2, schedule="interleaved", mbs=1, mbn=64, zero=3, sp=True, recompute=MF_SELECT),
    Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=0, sp=True, recompute=RecomputePlan.uniform("mlp_act")),
])
def test_mindformers_select_recompute_lists_read_back_as_the_plan(tmp_path, strategy):
    """MindFormers runs the plan's select layers (mlp_act) as written: select_recompute counts full + select layers
    per [chunk][stage] (full wins on the first layers: mindformers/models/utils.py LayerSetting.set)."""
    import yaml
    text = emit("mindformers", LLAMA70, MF_RUN, strategy).text
    rc = yaml.safe_load(text)["recompute_config"]
    plans = stage_plans(LLAMA70, strategy)
    flat = (lambda x: [n for row in x for n in row]) if strategy.vpp > 1 else list
    assert flat(rc["recompute"]) == [p.count("full") for p in plans]
    assert flat(rc["select_recompute"]) == [p.count("full") + p.count("mlp_act") for p in plans]
    assert rc["select_comm_recompute"] is False
    cluster, ran, back = round_trip(tmp_path, "mindformers", LLAMA70, 64, MF_RUN, strategy)
    assert ran == strategy and back == strategy
    same_estimate(LLAMA70, cluster, MF_RUN, ran, back)


def test_mindformers_runs_selective_layers_fully_and_keeps_its_select_layers():
    plan = RecomputePlan(mode="per-stage", stages=tuple(
        StageRecompute(none=15, selective=2, mlp_act=3) for _ in range(4)))
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=3, sp=True, recompute=plan)
    ran, notes = nearest("mindformers", LLAMA70, MF_RUN, strategy)
    assert [(p.count("none"), p.count("mlp_act"), p.count("full")) for p in stage_plans(LLAMA70, ran)] == [
        (15, 3, 2)] * 4
    assert any("ndcp's selective do" in n and "recomputed fully" in n for n in notes)  # words, not a list


def _mf_yaml(tmp_path, recompute_config: str, pp=2, vpp=1) -> str:
    path = tmp_path / "mf.yaml"
    path.write_text(f"parallel_config: {{data_parallel: 4, model_parallel: 8, pipeline_stage: {pp}, "
                    f"micro_batch_num: 32}}\nrunner_config: {{batch_size: 1}}\n"
                    f"model: {{model_config: {{num_layers: 80, pp_interleave_num: {vpp}}}}}\n"
                    f"recompute_config:\n{recompute_config}")
    return str(path)


@pytest.mark.parametrize("config,vpp,expected", [
    # (none, mlp_act, full) per virtual stage, as mindformers/models/utils.py LayerSetting reads the lists
    ("  recompute: [2, 1]\n  select_recompute: [5, 0]\n", 1, [(35, 3, 2), (39, 0, 1)]),
    ("  recompute: False\n  select_recompute: True\n", 1, [(0, 40, 0), (0, 40, 0)]),
    # a [stage] list with pp_interleave_num: spread over the chunks one layer at a time (_alloc_recompute_layer)
    ("  select_recompute: [3, 100]\n", 2, [(18, 2, 0), (0, 20, 0), (19, 1, 0), (0, 20, 0)]),
    ("  recompute: [[1, 0], [0, 2]]\n  select_recompute: [[true, 0], [4, 1]]\n", 2,
     [(0, 19, 1), (20, 0, 0), (16, 4, 0), (18, 0, 2)]),
    # pattern mappings: feed_forward\.mul (the product mlp_act drops) decides; other patterns read as keeping
    ("  select_recompute:\n    'feed_forward\\.mul': [4, 0]\n    'feed_forward\\.w1\\.activation\\.silu': True\n", 1,
     [(36, 4, 0), (40, 0, 0)]),
    ("  select_recompute: ['feed_forward\\.mul']\n  select_comm_recompute: [40, 40]\n", 1, [(0, 40, 0), (0, 40, 0)]),
    ("  select_recompute:\n    'attention\\.flash_attention': True\n", 1, [(40, 0, 0), (40, 0, 0)]),
])
def test_mindformers_recompute_lists_read_as_mindformers_reads_them(tmp_path, config, vpp, expected):
    run = RunSpec(global_batch=128, seq_len=8192)
    values = read_values(_mf_yaml(tmp_path, config, vpp=vpp), LLAMA70, run)
    stages = [values["recompute"]] * len(expected) if isinstance(values["recompute"], str) else None
    if stages:  # one option on every layer reads as the uniform mode
        assert all(n == (40 // vpp if m == values["recompute"] else 0)
                   for (a, b, c) in expected for m, n in zip(("none", "mlp_act", "full"), (a, b, c)))
        return
    assert [(s["none"], s["mlp_act"], s["full"]) for s in values["recompute"]["stages"]] == expected


@pytest.mark.parametrize("config", ["  select_recompute: [1, 2, 3]\n", "  select_recompute: [-1, 0]\n",
                                    "  recompute: [[1, 0], [0, 0]]\n", "  select_recompute: 'yes'\n"])
def test_a_malformed_mindformers_recompute_list_is_refused(tmp_path, config):
    with pytest.raises(SpecError, match=r"recompute_config\.(select_)?recompute must be a bool, a \[2\] list"):
        read_values(_mf_yaml(tmp_path, config), LLAMA70, RunSpec(global_batch=128, seq_len=8192))


DEFERRED = RunSpec(global_batch=32, seq_len=4096, precision="fp8", fp8_recipe="tensorwise", wgrad_deferral_limit=22,
                   disable_parameter_transpose_cache=True)  # the Llama-3-70B SFT recipe's settings
SFT_LAYOUT = Strategy(dp=2, tp=4, pp=4, vpp=5, schedule="interleaved", mbs=1, mbn=16, sp=True, recompute=SELECTIVE)


def test_the_megatron_memory_settings_are_emitted_and_the_deferral_read_back(tmp_path):
    emitted = emit("megatron", LLAMA70, DEFERRED, SFT_LAYOUT)
    arguments = shlex.split(emitted.text.replace("\\\n", " "), comments=True)
    at = arguments.index("--defer-embedding-wgrad-compute")
    assert arguments[at + 1:at + 3] == ["--wgrad-deferral-limit", "22"]
    # no flag at Megatron-LM d98e8a6 (arguments.py excludes the TransformerConfig field): a note says where to set it
    assert any("TransformerConfig.disable_parameter_transpose_cache=True" in n for n in emitted.notes)
    cluster, ran, back = round_trip(tmp_path, "megatron", LLAMA70, 32, DEFERRED, SFT_LAYOUT)
    assert back == ran == SFT_LAYOUT
    same_estimate(LLAMA70, cluster, DEFERRED, SFT_LAYOUT, back)
    # read with a run that does not defer, or defers another count: refused, naming the setting to give
    path = tmp_path / "megatron.txt"
    for other in (None, 4):
        run = RunSpec(global_batch=32, seq_len=4096, precision="fp8", fp8_recipe="tensorwise",
                      wgrad_deferral_limit=other)
        with pytest.raises(SpecError, match="set --wgrad-deferral-limit 22"):
            build_strategy(LLAMA70, cluster, run, read_values(str(path), LLAMA70, run))


def test_without_pipeline_parallelism_megatron_does_not_defer():
    emitted = emit("megatron", LLAMA70, DEFERRED, Strategy(dp=8, tp=4, mbs=1, mbn=4, sp=True, recompute=SELECTIVE))
    assert "--defer-embedding-wgrad-compute" not in shlex.split(emitted.text.replace("\\\n", " "), comments=True)
    assert any("only with pp > 1" in n for n in emitted.notes)


DELAYED = RunSpec(global_batch=256, seq_len=4096, overlap="ep", delay_wgrad_compute=True)
EP_LAYOUT = Strategy(dp=16, tp=2, ep=8, etp=1, mbs=1, mbn=16, zero=1, sp=True, recompute=SELECTIVE)


def test_delayed_weight_gradients_are_emitted_with_the_expert_overlap_and_read_back(tmp_path):
    """--delay-wgrad-compute (a TransformerConfig field on Megatron-LM d98e8a6's command line) beside
    --overlap-moe-expert-parallel-comm, which Megatron-Core requires with it; the file reads back as the same plan,
    and a run that does not delay is told which setting to give."""
    emitted = emit("megatron", MIXTRAL, DELAYED, EP_LAYOUT)
    arguments = shlex.split(emitted.text.replace("\\\n", " "), comments=True)
    assert {"--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"} <= set(arguments)
    cluster, ran, back = round_trip(tmp_path, "megatron", MIXTRAL, 32, DELAYED, EP_LAYOUT)
    assert back == ran == EP_LAYOUT
    same_estimate(MIXTRAL, cluster, DELAYED, EP_LAYOUT, back)
    run = RunSpec(global_batch=256, seq_len=4096, overlap="ep")
    with pytest.raises(SpecError, match="set --delay-wgrad-compute"):
        build_strategy(MIXTRAL, cluster, run, read_values(str(tmp_path / "megatron.txt"), MIXTRAL, run))


def test_without_the_expert_overlap_megatron_does_not_delay_the_weight_gradients():
    """Full recompute turns the expert all-to-all overlap off (Megatron refuses it): the delay goes with it, and the
    run the file runs says so."""
    emitted = emit("megatron", MIXTRAL, DELAYED, dataclasses.replace(EP_LAYOUT, recompute=FULL))
    arguments = shlex.split(emitted.text.replace("\\\n", " "), comments=True)
    assert "--overlap-moe-expert-parallel-comm" not in arguments and "--delay-wgrad-compute" not in arguments
    assert any("emitted without --delay-wgrad-compute" in n for n in emitted.notes)
    assert emitted.run is not None and not emitted.run.delay_wgrad_compute


KEPT_BF16 = RunSpec(global_batch=64, seq_len=8192, precision="fp8", fp8_recipe="tensorwise", first_layers_bf16=2,
                   last_layers_bf16=1)
TP2_PP2 = Strategy(dp=4, tp=2, pp=2, mbs=1, mbn=16, zero=1, sp=True)


def test_bf16_first_and_last_layers_are_emitted_and_read_back(tmp_path):
    """--first-last-layers-bf16 with both counts (TransformerConfig fields on Megatron-LM d98e8a6's command line,
    each 1 by default there); the file reads back as the same plan and estimate, and a run that keeps other layers
    in BF16 is told which settings to give."""
    arguments = _arguments(emit("megatron", LLAMA8, KEPT_BF16, TP2_PP2))
    at = arguments.index("--first-last-layers-bf16")
    assert arguments[at + 1:at + 5] == ["--num-layers-at-start-in-bf16", "2", "--num-layers-at-end-in-bf16", "1"]
    cluster, ran, back = round_trip(tmp_path, "megatron", LLAMA8, 16, KEPT_BF16, TP2_PP2)
    assert back == ran == TP2_PP2
    same_estimate(LLAMA8, cluster, KEPT_BF16, TP2_PP2, back)
    run = dataclasses.replace(KEPT_BF16, first_layers_bf16=0, last_layers_bf16=0)
    with pytest.raises(SpecError, match="the file keeps 2 first and 1 last layers in BF16 .*, the run 0 and 0; set "
                                        "--first-layers-bf16 2 --last-layers-bf16 1"):
        build_strategy(LLAMA8, cluster, run, read_values(str(tmp_path / "megatron.txt"), LLAMA8, run))
    assert "--first-last-layers-bf16" not in _arguments(emit("megatron", LLAMA8, run, TP2_PP2))


def test_a_file_without_the_bf16_counts_keeps_megatrons_default_of_one_at_each_end(tmp_path):
    text = emit("megatron", LLAMA8, KEPT_BF16, TP2_PP2).text
    bare = "\n".join(line for line in text.splitlines() if "-in-bf16" not in line)
    path = tmp_path / "megatron.txt"
    path.write_text(bare)
    one_each = dataclasses.replace(KEPT_BF16, first_layers_bf16=1, last_layers_bf16=1)
    assert read_values(str(path), LLAMA8, one_each)["bf16_layers"] == (1, 1)
    build_strategy(LLAMA8, ClusterSpec(H100, 16), one_each, read_values(str(path), LLAMA8, one_each))


DEFAULT_LOSS = RunSpec(global_batch=128, seq_len=8192)
UNFUSED_LOSS = RunSpec(global_batch=128, seq_len=8192, loss_kernel="unfused")
TP8 = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True)


def _arguments(emitted) -> list[str]:
    return shlex.split(emitted.text.replace("\\\n", " "), comments=True)


@pytest.mark.parametrize("run, other, flagged, message", [
    (DEFAULT_LOSS, UNFUSED_LOSS, True, "loss kernel native \\(--cross-entropy-loss-fusion\\) does not match the run's "
                                       "\\(unfused\\); set --loss-kernel native"),
    (UNFUSED_LOSS, DEFAULT_LOSS, False, "loss kernel unfused \\(no --cross-entropy-loss-fusion\\) does not match the "
                                        "run's \\(native\\); set --loss-kernel unfused"),
])
def test_megatron_files_state_their_loss_and_read_back_as_the_plan(tmp_path, run, other, flagged, message):
    """ndcp's Megatron files run Megatron's native fused loss (--cross-entropy-loss-fusion, impl native by default at
    Megatron-LM d98e8a6) for a plan on the trainer's loss, and no flag for --loss-kernel unfused (Megatron-LM's own
    default); each reads back as the plan, and a run asking for the other loss reading that file is refused, naming
    the flag and the option to give."""
    emitted = emit("megatron", LLAMA70, run, TP8)
    assert ("--cross-entropy-loss-fusion" in _arguments(emitted)) == flagged and emitted.run is None
    cluster, ran, back = round_trip(tmp_path, "megatron", LLAMA70, 64, run, TP8)
    assert back == ran == TP8
    same_estimate(LLAMA70, cluster, run, TP8, back)
    with pytest.raises(SpecError, match=message):
        build_strategy(LLAMA70, cluster, other, read_values(str(tmp_path / "megatron.txt"), LLAMA70, other))


def test_loss_kernel_native_emits_the_fused_loss_flag_too():
    native = dataclasses.replace(DEFAULT_LOSS, loss_kernel="native")
    assert "--cross-entropy-loss-fusion" in _arguments(emit("megatron", LLAMA70, native, TP8))


def test_the_kernels_megatron_cannot_run_are_emitted_as_its_fused_loss_with_a_note():
    """te (refused by Megatron-LM's validate_args at d98e8a6), flash and eager (not Megatron's losses) are emitted as
    the native fused loss, each with a note and the run the file states (Emitted.run); a torchtitan plan on
    flash-attn's loss emits the fused loss too, its run stating the trainer's (read back under --trainer megatron)."""
    for kernel in ("te", "flash", "eager"):
        emitted = emit("megatron", LLAMA70, dataclasses.replace(DEFAULT_LOSS, loss_kernel=kernel), TP8)
        assert "--cross-entropy-loss-fusion" in _arguments(emitted)
        assert "--cross-entropy-fusion-impl" not in _arguments(emitted)
        assert emitted.run.loss_kernel == "native" and any(f"--loss-kernel {kernel}" in n for n in emitted.notes)
    titan = RunSpec(global_batch=128, seq_len=8192, trainer="torchtitan", loss_kernel="flash")
    emitted = emit("megatron", LLAMA70, titan, TP8)
    assert "--cross-entropy-loss-fusion" in _arguments(emitted) and emitted.run.loss_kernel == "trainer"
