"""Measure the host time Megatron-Core spends issuing one transformer layer's operations, without a GPU, and write
the table docs/host_time.yaml (docs/formulas.md §3.2, "host issue time"; issue #34).

Runs in a scratch environment OUTSIDE the repository (the repository and its CI never install torch), on a Megatron-LM
checkout (d98e8a6 was measured):

    python3.11 -m venv /tmp/trainers-venv && /tmp/trainers-venv/bin/pip install torch==2.13.0 numpy packaging \
        einops pyyaml pydantic tqdm xxhash wandb tensorboard absl-py   # what megatron.core imported in the
                                                                       # measured environment
    git clone https://github.com/NVIDIA/Megatron-LM /tmp/megatron-lm && git -C /tmp/megatron-lm checkout d98e8a6
    MEGATRON_LM=/tmp/megatron-lm /tmp/trainers-venv/bin/python scripts/measure_host_time.py > docs/host_time.yaml

Question. Megatron-Core's alltoall token dispatcher waits once per MoE layer forward for the token counts
(`MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize`: `d2h_event.synchronize()` at `cuda_sync_point`,
`megatron/core/transformer/moe/token_dispatcher.py`). After the wait the GPU's queue is empty, so the stretch from
one layer's wait to the next takes at least the host's time to issue it. How long is that host time, in the
trainer's own Python, and how many operations does it issue?

Method. One Megatron-Core TransformerLayer (local spec, `get_gpt_layer_local_spec`: no Transformer Engine, which needs
a GPU) of Qwen3-30B-A3B's structure (q/k RMSNorm, GQA, SwiGLU, a top-8 router over the experts with an auxiliary
loss and forced balance, as the Megatron-Bridge recipes set it, dropless, the alltoall dispatcher, unfused permute)
at TINY sizes (16 tokens, hidden 64), so that every kernel takes next to nothing on the CPU and the wall time is the
trainer's Python, PyTorch's dispatcher and autograd: what the host spends per operation before the launch. A dense
layer of the same sizes is measured beside it. The `rows` run in a one-rank gloo world, so expert parallelism is 1:
the dispatcher then synchronises at `before_finish` (end of dispatch) instead of `before_ep_alltoall`, and skips its
count all-gather, its all-to-alls and its sort by local expert. The `ep_rows` run them: 128 experts (Qwen3-30B-A3B's)
over EP 16, 8 and 4 (8, 16, 32 local experts), rank 0 of a fake world (torch's `fake` process group, whose
collectives return at once; `_ep_stand_ins`), each in a fresh process (`--ep N`), with the sort unfused (`split` into
EP x local-expert chunks and `cat`, `moe_utils.sort_chunks_by_idxs`), as `moe_permute_fusion = False` runs it; the
fused sort is one Transformer Engine kernel (not measured). The local spec
runs the experts as `SequentialMLP`, a Python loop over the local experts (6 kernel operations each), where the
Megatron-Bridge rows run `TEGroupedMLP` (one Transformer Engine GroupedLinear call per GEMM, whose C++ issues the
per-expert cuBLAS calls): the expert part is reported per local expert, measured at several expert counts, and is a
stand-in. Stand-ins where the layer needs a GPU: the core attention is one fused operation (`_FusedCore`, as
Transformer Engine's cuDNN attention runs it); `torch.cuda.current_device`, `current_stream`, `stream`, `Stream` and
`Event` (the dispatcher's D2H stream and event) do nothing, and so does the CUDA RNG tracker's `fork` (forced
balance draws its random logits from the CPU generator): on a GPU those calls cost host time too (not counted here),
and the dispatcher's D2H copies of the counts (already on the CPU here) are one copy operation each.

Per configuration the layer runs forward and backward WARMUP times, then ITERATIONS times timed with
time.perf_counter_ns (one thread, `torch.set_num_threads(1)`), the forward split at the dispatcher's wait; the
median and the minimum are reported. A separate pass counts the aten operations (a TorchDispatchMode) in each
segment: forward before the wait, forward after it, backward; `kernel_ops` leaves out views, metadata reads and
uninitialised allocations (VIEWS), so each of them launches at least one kernel on a GPU. CUDA's own launch cost
comes on top of the CPU time measured here, in place of the tiny CPU kernels' own time (`reference_op_us`, one bare
`torch.add`): "usually between 5-20 microseconds" on the CPU per launch (facebookresearch/HolisticTraceAnalysis
docs/source/features/cuda_kernel_launch_stats.rst, Meta's trace analysis tool). The host CPU of a DGX H100/B200
(Xeon Platinum 8480C / 8570) or a GB200 (Grace, Arm Neoverse V2) differs from the CPU measured (`cpu` in the table),
and a shared machine inflates the medians: the minima are the least disturbed iterations.
EXPERTS (comma-separated expert counts, EP 1), EP (comma-separated degrees; empty: none) and ITERATIONS override the
defaults.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MEGATRON_SOURCE = os.environ.get("MEGATRON_LM", "")
MEGATRON_COMMIT = "d98e8a6"
TOKENS = 16          # sequence length; micro-batch 1
HIDDEN = 64
HEADS, QUERY_GROUPS, HEAD_DIM = 8, 1, 16     # Qwen3-30B-A3B: 32 heads, 4 groups, head dim 128
FFN_DENSE, FFN_EXPERT = 96, 32
TOP_K = 8                                     # Qwen3-30B-A3B: 128 experts, top 8
EXPERT_COUNTS = tuple(int(e) for e in os.environ.get("EXPERTS", "8,16,32,64,128").split(","))
WARMUP, ITERATIONS = 20, int(os.environ.get("ITERATIONS", "200"))
EP_EXPERTS = 128                              # Qwen3-30B-A3B's experts, over EP ranks: 8, 16, 32 local
EP_DEGREES = tuple(int(e) for e in os.environ.get("EP", "16,8,4").split(",") if e)


class _NoCuda:
    """Stand-ins for the CUDA calls the MoE layer makes on a CPU-only build (module docstring)."""

    class Stream:
        def wait_stream(self, other):
            return None

        def record_event(self):
            return _NoCuda.Event()

    class Event:
        def synchronize(self):
            return None

        def record(self, stream=None):
            return None

    @staticmethod
    def install() -> None:
        stream = _NoCuda.Stream()
        torch.cuda.current_device = lambda: "cpu"
        torch.cuda.current_stream = lambda device=None: stream
        torch.cuda.Stream = lambda *a, **k: stream
        torch.cuda.Event = lambda *a, **k: _NoCuda.Event()
        torch.cuda.stream = lambda s=None: contextlib.nullcontext()


class _Clock:
    """Marks the dispatcher's wait: `marks` gets perf_counter_ns at each `d2h_event.synchronize()` point and
    `on_sync` (if set) is called there."""

    def __init__(self):
        self.marks: list[int] = []
        self.on_sync = None

    def install(self) -> None:
        from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
        original = MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize
        clock = self

        def wrapped(dispatcher, point, tokens_per_expert=None):
            if not hasattr(dispatcher, "cuda_dtoh_stream") or dispatcher.cuda_dtoh_stream is None:
                dispatcher.cuda_dtoh_stream = _NoCuda.Stream()
            out = original(dispatcher, point, tokens_per_expert)
            if point == dispatcher.cuda_sync_point:
                clock.marks.append(time.perf_counter_ns())
                if clock.on_sync is not None:
                    clock.on_sync()
            return out

        MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize = wrapped


CLOCK = _Clock()


# aten operations that only make a view or read metadata: no kernel on a GPU
VIEWS = frozenset({"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "unsqueeze", "squeeze", "slice",
                   "select", "expand", "as_strided", "detach", "alias", "split", "split_with_sizes", "chunk",
                   "unbind", "narrow", "lift_fresh", "_reshape_alias", "numpy_T", "flatten", "unflatten", "diagonal",
                   "sym_size", "sym_stride", "sym_numel", "is_same_size", "empty", "empty_like", "empty_strided",
                   "new_empty", "new_empty_strided"})


class _OpCounter(TorchDispatchMode):
    """Counts aten operations per segment, all (`counts`) and those that run a kernel on a GPU (`kernels`: not a
    view, a metadata read or an uninitialised allocation); `segment` is switched by the caller (and by the
    dispatcher's wait)."""

    def __init__(self):
        super().__init__()
        self.segment = "forward_before_sync"
        self.counts: Counter = Counter()
        self.kernels: Counter = Counter()
        self.ops: dict[str, Counter] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[self.segment] += 1
        if func.overloadpacket.__name__ not in VIEWS:
            self.kernels[self.segment] += 1
        self.ops.setdefault(self.segment, Counter())[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


class _FusedCore(torch.nn.Module):
    """Core attention as one fused operation, as Transformer Engine's cuDNN fused attention runs it on a GPU (the
    local spec's unfused DotProductAttention builds its causal mask on "cuda" and runs 8-10 operations no
    Megatron-Bridge row runs): [s, b, heads, d] q and [s, b, groups, d] k, v -> [s, b, heads * d]."""

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None, **kwargs):
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)


def _setup(ep: int = 1) -> None:
    """A one-rank gloo world (EP 1), or rank 0 of a fake world of `ep` ranks (EP_STAND_INS)."""
    sys.path.insert(0, MEGATRON_SOURCE)
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
    torch.set_num_threads(1)
    _NoCuda.install()
    if ep == 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29541")
        dist.init_process_group("gloo", rank=0, world_size=1)
        parallel_state.initialize_model_parallel(1, 1)
    else:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=ep, store=FakeStore())
        parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=ep, create_gloo_process_groups=False)
        _ep_stand_ins()
    # the CUDA RNG tracker's forks (forced balance draws its random logits in the expert-parallel one) need CUDA:
    # the default CPU generator stands in
    get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
    CLOCK.install()


def _ep_stand_ins() -> None:
    """EP > 1 on one process: the fake process group's collectives return at once, so the count all-gather
    (`tensor_parallel.mappings.dist_all_gather_func`) is one copy of this rank's counts into every rank's slot (every
    rank routes alike: symmetric splits), and the dispatcher's D2H moves (`maybe_move_tensor_to_cpu`, a no-op for
    CPU tensors) are one copy each, to numpy where asked, as on a GPU."""
    from megatron.core.tensor_parallel import mappings
    from megatron.core.transformer.moe import token_dispatcher

    def gather(output, tensor, group=None, async_op=False):
        output.view(-1, *tensor.shape).copy_(tensor)

    def to_cpu(tensor, as_numpy=False, record_stream=False):
        if torch.is_tensor(tensor):
            tensor = tensor.to("cpu", copy=True)
            tensor = tensor.numpy() if as_numpy else tensor
        return tensor

    mappings.dist_all_gather_func = gather
    token_dispatcher.maybe_move_tensor_to_cpu = to_cpu


def _layer(experts: int | None):
    """Megatron-Core's local-spec TransformerLayer, MoE with `experts` experts (None: dense), in float32 on the CPU
    (bf16 matmuls on the CPU are slow kernels, not host time)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig
    moe = {} if experts is None else dict(
        num_moe_experts=experts, moe_ffn_hidden_size=FFN_EXPERT, moe_router_topk=TOP_K,
        moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3,
        moe_router_force_load_balancing=True, moe_permute_fusion=False, moe_grouped_gemm=False,
        moe_router_dtype="fp32")
    config = TransformerConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=HEADS,
                               num_query_groups=QUERY_GROUPS, kv_channels=HEAD_DIM, ffn_hidden_size=FFN_DENSE,
                               gated_linear_unit=True, activation_func=torch.nn.functional.silu,
                               bias_activation_fusion=False, add_bias_linear=False, normalization="RMSNorm",
                               qk_layernorm=True, use_cpu_initialization=True, hidden_dropout=0.0,
                               attention_dropout=0.0, masked_softmax_fusion=False, bias_dropout_fusion=False,
                               apply_rope_fusion=False, **moe)
    spec = get_gpt_layer_local_spec(num_experts=experts, normalization="RMSNorm", qk_layernorm=True)
    layer = build_module(spec, config=config, layer_number=1)
    layer.self_attention.core_attention = _FusedCore()
    return layer


def _step(layer, x, grad, on_forward_end=None) -> tuple[int, int, int, int]:
    """One forward and backward: (t0, wait mark or 0, forward end, backward end) in perf_counter_ns."""
    CLOCK.marks.clear()
    t0 = time.perf_counter_ns()
    out = layer(x, attention_mask=None)[0]
    t1 = time.perf_counter_ns()
    if on_forward_end is not None:
        on_forward_end()
    out.backward(grad)
    t2 = time.perf_counter_ns()
    return t0, (CLOCK.marks[0] if CLOCK.marks else 0), t1, t2


def _us(values: list[float]) -> dict:
    return {"median_us": round(statistics.median(values), 1), "min_us": round(min(values), 1)}


def measure(experts: int | None) -> dict:
    """Times and operation counts of one layer's forward (before / after the wait) and backward."""
    layer = _layer(experts)
    x = torch.randn(TOKENS, 1, HIDDEN, requires_grad=True)
    grad = torch.randn(TOKENS, 1, HIDDEN)
    for _ in range(WARMUP):
        _step(layer, x, grad)
    before, after, forward, backward = [], [], [], []
    for _ in range(ITERATIONS):
        t0, mark, t1, t2 = _step(layer, x, grad)
        forward.append((t1 - t0) / 1e3)
        backward.append((t2 - t1) / 1e3)
        if mark:
            before.append((mark - t0) / 1e3)
            after.append((t1 - mark) / 1e3)
    counter = _OpCounter()

    def at_sync():
        counter.segment = "forward_after_sync"
    CLOCK.on_sync = at_sync

    def at_backward():
        counter.segment = "backward"
    with counter:
        _step(layer, x, grad, at_backward)
    CLOCK.on_sync = None
    row = {"layer": "dense" if experts is None else "moe", "experts": experts,
           "ops": {k: counter.counts[k] for k in ("forward_before_sync", "forward_after_sync", "backward")
                   if k in counter.counts},
           "kernel_ops": {k: counter.kernels[k] for k in ("forward_before_sync", "forward_after_sync", "backward")
                          if k in counter.kernels},
           "forward": _us(forward), "backward": _us(backward)}
    if before:
        row["forward_before_sync"] = _us(before)
        row["forward_after_sync"] = _us(after)
    row["top_ops"] = {k: dict(v.most_common(6)) for k, v in counter.ops.items()}
    return row


def _linear(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of ys on xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
    return my - slope * mx, slope


def _cpu() -> str:
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _load() -> str:
    with contextlib.suppress(OSError):
        return " ".join(open("/proc/loadavg", encoding="utf-8").read().split()[:3])
    return "unknown"


def _print_row(row: dict) -> None:
    print(f"- layer: {row['layer']}")
    print(f"  experts: {row['experts'] if row['experts'] is not None else 'null'}")
    if "ep" in row:
        print(f"  ep: {row['ep']}\n  local_experts: {row['experts'] // row['ep']}")
    print(f"  ops: {row['ops']}".replace("'", ""))
    print(f"  kernel_ops: {row['kernel_ops']}".replace("'", ""))
    for key in ("forward", "forward_before_sync", "forward_after_sync", "backward"):
        if key in row:
            print(f"  {key}: {row[key]}".replace("'", ""))
    print("  top_ops:")
    for segment, ops in row["top_ops"].items():
        print(f"    {segment}: {ops}".replace("'", ""))


def _print_fits(prefix: str, moe: list[dict], counts: list[float]) -> None:
    """Fixed part and per local expert of each segment: least squares over `moe` against `counts`."""
    for name, stat in ((prefix, "median_us"), (f"{prefix}_min", "min_us")):
        print(f"{name}:")
        for key in ("forward_before_sync", "forward_after_sync", "backward"):
            a, b = _linear(counts, [r[key][stat] for r in moe])
            oa, ob = _linear(counts, [float(r["kernel_ops"].get(key, 0)) for r in moe])
            print(f"  {key}: {{fixed_us: {a:.1f}, per_expert_us: {b:.2f}, fixed_kernel_ops: {oa:.1f}, "
                  f"per_expert_kernel_ops: {ob:.2f}}}")


def _print(rows: list[dict], ep_rows: list[dict], load: str) -> None:
    print("# Written by scripts/measure_host_time.py; do not edit by hand (module docstring: method).")
    print(f"versions: torch {torch.__version__}, Megatron-LM {MEGATRON_COMMIT} (local spec, no Transformer Engine)")
    print(f"cpu: '{_cpu()}'")
    print(f"cpu_threads: {os.cpu_count()}  # load average (1, 5, 15 min) before and after the run: {load}, {_load()}")
    print(f"python: '{platform.python_version()}'")
    print(f"sizes: {{tokens: {TOKENS}, hidden: {HIDDEN}, heads: {HEADS}, query_groups: {QUERY_GROUPS}, "
          f"head_dim: {HEAD_DIM}, ffn_dense: {FFN_DENSE}, ffn_expert: {FFN_EXPERT}, top_k: {TOP_K}}}")
    print("dispatcher: 'alltoall, EP 1 (gloo world of 1): waits at before_finish'")
    print(f"iterations: {ITERATIONS}")
    print("rows:")
    for row in rows:
        _print_row(row)
    moe = [r for r in rows if r["layer"] == "moe"]
    print("# the MoE layer's host time and kernel operations: a fixed part and one per local expert (SequentialMLP,")
    print("# the local spec's expert loop), least squares over the rows against the expert count; moe_fit on the")
    print("# medians, moe_fit_min on the minima (the least disturbed iterations of a shared machine)")
    _print_fits("moe_fit", moe, [float(r["experts"]) for r in moe])
    if ep_rows:
        print(f"# EP > 1 ({EP_EXPERTS} experts over a fake world of ep ranks, _ep_stand_ins): the dispatcher waits at")
        print("# before_ep_alltoall; its count all-gather, all-to-alls and sort by local expert (unfused: split")
        print("# into ep x local chunks and cat) run; fits against the local experts")
        print("ep_rows:")
        for row in ep_rows:
            _print_row(row)
        _print_fits("moe_ep_fit", ep_rows, [float(r["experts"] // r["ep"]) for r in ep_rows])
    print(f"reference_op_us: {_reference_op():.2f}  # one tiny torch.add, no autograd: this CPU's floor per operation")


def _reference_op(n: int = 20000) -> float:
    """Median over 5 runs of the mean time of one `a + b` on two 16 x 64 float32 tensors."""
    a, b = torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN)
    runs = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            torch.add(a, b)
        runs.append((time.perf_counter_ns() - t0) / n / 1e3)
    return statistics.median(runs)


def _ep_row(ep: int) -> dict:
    """One EP row, measured in a fresh process (one process group per process)."""
    done = subprocess.run([sys.executable, __file__, "--ep", str(ep)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if not MEGATRON_SOURCE:
        sys.exit("MEGATRON_LM must name a Megatron-LM checkout (module docstring)")
    if len(sys.argv) == 3 and sys.argv[1] == "--ep":
        ep = int(sys.argv[2])
        _setup(ep)
        print(json.dumps({**measure(EP_EXPERTS), "ep": ep}))
        return
    _setup()
    load = _load()
    rows = [measure(None)] + [measure(e) for e in EXPERT_COUNTS]
    ep_rows = [_ep_row(ep) for ep in EP_DEGREES]
    _print(rows, ep_rows, load)


if __name__ == "__main__":
    main()
