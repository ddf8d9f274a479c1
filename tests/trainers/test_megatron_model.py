"""Megatron-LM files are launch-complete: the model's architecture as Megatron names it (RoPE base and scaling,
qk-norm, biases, norm epsilon, the MoE router, MLA and MTP), and a marked block of the settings the user fills in,
with Megatron's own flags and placeholder values."""
import dataclasses
import shlex

from ndcp.specs import RunSpec, Strategy
from ndcp.specs.library import load_model
from ndcp.specs.rope import RopeScaling
from ndcp.trainers import emit
from ndcp.trainers.megatron_model import LLAMA3_FIXED, PLACEHOLDERS, architecture

RUN = RunSpec(global_batch=1024, seq_len=8192)


def options(flags: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for flag in flags:
        if flag.startswith("--"):
            out[flag] = []
            key = flag
        else:
            out[key].append(flag)
    return out


def flags_of(name: str, notes: list[str] | None = None) -> dict[str, list[str]]:
    return options(architecture(load_model(name), RUN, [] if notes is None else notes))


def test_llama3_states_its_rotary_base_which_megatron_would_take_as_10000():
    got = flags_of("llama3-70b")
    assert got["--position-embedding-type"] == ["rope"] and got["--rotary-base"] == ["500000"]
    assert got["--norm-epsilon"] == ["1e-05"] and got["--normalization"] == ["RMSNorm"]
    assert got["--num-query-groups"] == ["8"] and "--swiglu" in got and "--disable-bias-linear" in got
    assert "--use-rope-scaling" not in got and "--qk-layernorm" not in got


def test_llama3_1_states_its_rope_scaling_factor():
    got = flags_of("llama3.1-405b")
    assert "--use-rope-scaling" in got and got["--rope-scaling-factor"] == ["8.0"]


def test_a_llama3_scaling_megatron_cannot_state_is_a_note():
    model = load_model("llama3.1-405b")
    other = dataclasses.replace(model, rope_scaling=RopeScaling("llama3", 8.0, 4096))
    notes: list[str] = []
    architecture(other, RUN, notes)
    assert LLAMA3_FIXED["original_max_positions"] == 8192
    assert any("original_max_positions 4096 cannot be stated" in n for n in notes)


def test_qwen_states_qk_norm_and_its_biases():
    assert "--qk-layernorm" in flags_of("qwen3-235b-a22b")
    assert flags_of("qwen3-235b-a22b")["--norm-epsilon"] == ["1e-06"]
    assert "--add-qkv-bias" in flags_of("qwen2.5-72b")


def test_deepseek_v3_states_its_router_yarn_mla_and_mtp():
    notes: list[str] = []
    got = flags_of("deepseek-v3", notes)
    assert got["--moe-router-score-function"] == ["sigmoid"]
    assert got["--moe-router-num-groups"] == ["8"] and got["--moe-router-group-topk"] == ["4"]
    assert "--moe-router-enable-expert-bias" in got and got["--moe-router-topk-scaling-factor"] == ["2.5"]
    assert got["--moe-shared-expert-intermediate-size"] == ["2048"] and got["--moe-layer-freq"] == ["([0]*3+[1]*58)"]
    assert got["--rope-type"] == ["yarn"] and got["--rotary-scaling-factor"] == ["40.0"]
    assert got["--mscale-all-dim"] == ["1.0"] and got["--rotary-base"] == ["10000"]
    assert "--multi-latent-attention" in got and got["--mtp-num-layers"] == ["1"]
    assert notes == []  # YaRN from 4096 positions: MLATransformerConfig's own default


def test_mixtral_routes_by_softmax_without_groups():
    got = flags_of("mixtral-8x7b")
    assert got["--moe-router-score-function"] == ["softmax"] and got["--rotary-base"] == ["1000000"]
    assert not {"--moe-router-num-groups", "--moe-router-enable-expert-bias", "--moe-router-topk-scaling-factor"} & set(got)


def test_gpt3_has_learned_positions_and_no_rotary_base():
    got = flags_of("gpt3-175b")
    assert got["--position-embedding-type"] == ["learned_absolute"] and "--rotary-base" not in got


def test_the_users_settings_come_last_as_placeholders_named_in_a_comment():
    text = emit("megatron", load_model("llama3-70b"), RUN, Strategy(dp=64, tp=8, mbs=2, mbn=8, zero=1, sp=True)).text
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[0].startswith(f"# FILL IN before launching: the last {len(PLACEHOLDERS)} options")
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    tail = tokens[-2 * len(PLACEHOLDERS):]
    assert list(zip(tail[::2], tail[1::2])) == [(p.option, p.value) for p in PLACEHOLDERS]
    assert {p.option for p in PLACEHOLDERS} >= {"--tokenizer-type", "--tokenizer-model", "--data-path",
                                                "--train-iters", "--lr", "--min-lr", "--lr-decay-style",
                                                "--lr-warmup-iters", "--save", "--load"}
    assert all(f"#   {p.value}: " in text for p in PLACEHOLDERS)


def test_hybrid_layers_are_stated_in_a_note_not_as_gpt_arguments():
    notes: list[str] = []
    flags = flags_of("qwen3-next-80b-a3b", notes)
    assert flags["--num-layers"] == ["48"] and flags["--kv-channels"] == ["256"]
    assert len(notes) == 1 and "layer pattern GGGAGGGA" in notes[0] and "Gated DeltaNet 16 key / 32 value heads" \
        in notes[0] and "gated attention output" in notes[0] and "pretrain_mamba.py" in notes[0]
    flags_of("nemotron-h-8b", notes)
    assert "Mamba-2 128 heads of 64, state 128, 8 groups" in notes[1] and "(one block per layer)" in notes[1]
    llama: list[str] = []
    flags_of("llama3-8b", llama)
    assert not any("hybrid" in note for note in llama)
