"""Measure the host time of a Moonlight-16B-A3B-structured Megatron-Core layer (MLA attention, a sigmoid router with
an expert bias and the sequence auxiliary loss, two shared experts) beside the Qwen3-30B-A3B-structured one of
scripts/measure_host_time.py, and what each selective-recompute module adds to it; writes docs/host_time_mla.yaml
(docs/formulas.md §3.2, "The Moonlight-16B one-micro-batch step"; issue #34).

Same method, environment and stand-ins as scripts/measure_host_time.py (its module docstring; imported from it):
local spec, tiny sizes on the CPU, rank 0 of torch's fake process group, the forward split at the alltoall
dispatcher's wait, minima and medians of ITERATIONS iterations, a TorchDispatchMode counting the operations that
launch a kernel on a GPU. Run on the Megatron-LM revision of the Moonlight study (24bad8e6, the Megatron-Bridge
skill `nemo-mbridge-perf-activation-recompute`), whose `megatron.core` imports a Triton kernel module at import time
(`transformer/moe/ops/paged_stash.py`, not run by a training layer): an empty module stands in for it.

    git -C /tmp/megatron-lm checkout 24bad8e6   # the environment of scripts/measure_host_time.py
    MEGATRON_LM=/tmp/megatron-lm /tmp/trainers-venv/bin/python scripts/measure_host_time_mla.py > docs/host_time_mla.yaml

Moonlight's layer, as Megatron-Bridge's DeepSeek-V3 bridge builds it from the model's configuration
(`src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py` @600d069b: `seq_aux_loss`, `sigmoid`, expert bias;
Moonlight: no q LoRA, kv LoRA, top 6 of 64 experts, 2 shared experts) and the recipe runs it
(`recipes/moonlight/h100/moonlight_16b.py` @600d069b: alltoall dispatcher, EP 8), at tiny sizes: 64 experts over a
fake EP 8 (8 local experts, `SequentialMLP`'s per-expert loop standing in for `TEGroupedMLP`, as in
scripts/measure_host_time.py), kv rank 32, q/k head dims 16 + 8 (RoPE), v head dim 16, shared experts 2 x the
expert width. The last row runs the recipe's TP 2 with sequence parallelism (`_setup_tp`: the all-gathers and
reduce-scatters around attention and the shared experts issued, each one copy). Not measured: Transformer
Engine's modules, the fused permutation (`moe_permute_fusion`), the shared-expert stream overlap, and CUDA's launch
(module docstring there).
A selective-recompute row sets `recompute_granularity = "selective"` and one module list; the checkpoints save and
restore the CPU and CUDA generators' states (CUDA's a few bytes on a GPU: the CPU generator's state stands in for
it, its restore does nothing; Transformer Engine's FP8 state, which `CheckpointWithoutOutput` reads, is off).
`moe_act` applies to `TEGroupedMLP` only (`experts.py`), so it is not measured.
RECOMPUTE (semicolon-separated module lists, "" = none), ITERATIONS and ROUNDS override the defaults.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import types

import torch

import measure_host_time as base

EXPERTS, EP, TOP_K = 64, 8, 6
RECOMPUTES = tuple(os.environ.get("RECOMPUTE", ";core_attn;mla_up_proj;layernorm").split(";"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))  # every row once per round, interleaved: a shared machine's load drifts
SEGMENTS = ("forward_before_sync", "forward_after_sync", "backward")


class _Core(base._FusedCore):
    """The fused core attention of scripts/measure_host_time.py, built from the MLA spec's arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()


def _moonlight_layer(experts: int, recompute: tuple[str, ...] = (), tp: int = 1):
    """Megatron-Core's local-spec MLA + MoE TransformerLayer of Moonlight's structure, float32 on the CPU."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import MLATransformerConfig
    selective = dict(recompute_granularity="selective", recompute_modules=list(recompute)) if recompute else {}
    if tp > 1:
        selective.update(tensor_model_parallel_size=tp, sequence_parallel=True, expert_tensor_parallel_size=1)
    config = MLATransformerConfig(
        num_layers=1, hidden_size=base.HIDDEN, num_attention_heads=base.HEADS, ffn_hidden_size=base.FFN_DENSE,
        q_lora_rank=None, kv_lora_rank=32, qk_head_dim=16, qk_pos_emb_head_dim=8, v_head_dim=16, rope_type="rope",
        gated_linear_unit=True, activation_func=torch.nn.functional.silu, bias_activation_fusion=False,
        add_bias_linear=False, normalization="RMSNorm", use_cpu_initialization=True, hidden_dropout=0.0,
        attention_dropout=0.0, masked_softmax_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False,
        num_moe_experts=experts, moe_ffn_hidden_size=base.FFN_EXPERT, moe_router_topk=TOP_K,
        moe_shared_expert_intermediate_size=2 * base.FFN_EXPERT, moe_token_dispatcher_type="alltoall",
        moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-3, moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True, moe_router_topk_scaling_factor=2.446, moe_router_pre_softmax=True,
        moe_permute_fusion=False, moe_grouped_gemm=False, moe_router_dtype="fp32", **selective)
    spec = get_gpt_layer_local_spec(num_experts=experts, normalization="RMSNorm", multi_latent_attention=True)
    spec.submodules.self_attention.submodules.core_attention = _Core
    return build_module(spec, config=config, layer_number=1)


def _stand_ins() -> None:
    """The Triton kernel module megatron.core imports (not run by a training layer)."""
    stash = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
    stash.GLOBAL_BLOCK_SIZE, stash.paged_stash_copy_kernel, stash.paged_stash_pop_kernel = 1024, None, None
    sys.modules[stash.__name__] = stash


def _setup_tp(tp: int) -> None:
    """Rank 0 of a fake world of EP ranks holding TP `tp` x DP (EP over all of them, ETP 1, as the recipe), the
    sequence-parallel shard of the tokens: base._setup's stand-ins plus the reduce-scatter (one copy of this rank's
    slice) and the norms (torch's RMSNorm, which the local spec refuses under sequence parallelism only because
    Megatron-Core marks the norm's weights for a gradient all-reduce across TP, once per step)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import mappings
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
    from megatron.core.transformer import torch_norm
    torch.set_num_threads(1)
    base._NoCuda.install()
    dist.init_process_group("fake", rank=0, world_size=EP, store=FakeStore())
    parallel_state.initialize_model_parallel(tp, 1, expert_model_parallel_size=EP, expert_tensor_parallel_size=1,
                                             create_gloo_process_groups=False)
    base._ep_stand_ins()
    mappings.dist_reduce_scatter_func = lambda out, inp, group=None, async_op=False: out.copy_(
        inp.view(-1, *out.shape)[0])
    torch_norm.WrappedTorchNorm.__new__ = lambda cls, config, hidden_size, eps=1e-5, **kwargs: torch.nn.RMSNorm(
        hidden_size, eps=eps)
    get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
    base.CLOCK.install()
    base.TOKENS //= tp


def _measure(kind: str, recompute: tuple[str, ...], tp: int = 1) -> dict:
    """One row, in this (fresh) process: `kind` "moonlight" or "qwen3" (scripts/measure_host_time.py's layer)."""
    _stand_ins()
    base.MEGATRON_SOURCE = os.environ["MEGATRON_LM"]
    sys.path.insert(0, base.MEGATRON_SOURCE)
    if tp > 1:
        _setup_tp(tp)
    else:
        base._setup(EP)
    from megatron.core.tensor_parallel import random as rng
    torch.cuda.random.get_rng_state = torch.cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    rng._set_cuda_rng_state = lambda new_state, device=-1, graph_safe=False: None
    # CheckpointWithoutOutput asks Transformer Engine whether FP8 is on (it is not here)
    rng.FP8GlobalStateManager = types.SimpleNamespace(is_fp8_enabled=lambda: False, get_fp8_recipe=lambda: None)
    rng.activation_recompute_forward = rng.fp8_autocast = lambda *a, **k: contextlib.nullcontext()
    if kind == "moonlight":
        base._layer = lambda experts: _moonlight_layer(experts, recompute, tp)
    return {**base.measure(EXPERTS), "model": kind, "ep": EP, "tp": tp, "recompute": list(recompute)}


def _row(kind: str, recompute: str, tp: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--row", kind, recompute, str(tp)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _merged(runs: list[dict]) -> dict:
    """One row from its rounds: the least of the minima, the median of the medians."""
    row = dict(runs[0])
    for key in SEGMENTS:
        row[key] = {"median_us": round(statistics.median(r[key]["median_us"] for r in runs), 1),
                    "min_us": min(r[key]["min_us"] for r in runs)}
    return row


def main() -> None:
    if not os.environ.get("MEGATRON_LM"):
        sys.exit("MEGATRON_LM must name a Megatron-LM checkout (module docstring)")
    if len(sys.argv) == 5 and sys.argv[1] == "--row":
        print(json.dumps(_measure(sys.argv[2], tuple(m for m in sys.argv[3].split(",") if m), int(sys.argv[4]))))
        return
    load = base._load()
    plan = [("qwen3", "", 1)] + [("moonlight", r, 1) for r in RECOMPUTES] + [("moonlight", "", 2)]
    runs = [[_row(kind, r, tp) for kind, r, tp in plan] for _ in range(ROUNDS)]
    rows = [_merged([round_[i] for round_ in runs]) for i in range(len(plan))]
    print("# Written by scripts/measure_host_time_mla.py; do not edit by hand (module docstring: method).")
    print(f"versions: torch {torch.__version__}, Megatron-LM {os.environ.get('MEGATRON_COMMIT', '24bad8e6')} "
          "(local spec, no Transformer Engine)")
    print(f"cpu: '{base._cpu()}'")
    print(f"cpu_threads: {os.cpu_count()}  # load average before and after the run: {load}, {base._load()}")
    print(f"experts: {EXPERTS}\nep: {EP}\nlocal_experts: {EXPERTS // EP}\niterations: {base.ITERATIONS}\n"
          f"rounds: {ROUNDS}  # min_us: the least over the rounds; median_us: the median of the rounds' medians")
    print("rows:")
    for row in rows:
        print(f"- model: {row['model']}\n  tp: {row['tp']}\n  recompute: {row['recompute']}".replace("'", ""))
        print(f"  kernel_ops: {row['kernel_ops']}".replace("'", ""))
        for key in SEGMENTS:
            print(f"  {key}: {row[key]}".replace("'", ""))
        print(f"  layer_pass_min_us: {sum(row[k]['min_us'] for k in SEGMENTS):.1f}")


if __name__ == "__main__":
    main()
