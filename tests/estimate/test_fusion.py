"""torch.compile's time in torchtitan (estimate/fusion.py): the element-wise work between a block's GEMMs is counted
op by op, eager (one HBM read of each input and one write of each output per op, fp32 intermediates at 4 bytes) or
fused by TorchInductor (one read and one write per fused region); GEMMs and the attention kernel are unchanged, so a
compiled step is never slower than an eager one, and the gain is exactly the bytes the fusion saves at HBM speed."""
import dataclasses

import pytest

from ndcp.estimate.compute import elementwise_bytes
from ndcp.estimate.fusion import layer_elementwise_bytes, torchtitan_block_bytes, torchtitan_counted
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

LLAMA8, LLAMA70, MIXTRAL = load_model("llama3-8b"), load_model("llama3-70b"), load_model("mixtral-8x7b")
H100 = device_preset("h100")
EAGER = RunSpec(global_batch=16, seq_len=8192, trainer="torchtitan")
COMPILED = dataclasses.replace(EAGER, torch_compile=True)


def test_eager_llama3_8b_block_by_hand():
    """h 4096, 32 query and 8 KV heads of 128, ffn 14336, bf16 (2 bytes), per token: two fused RMSNorms (read and
    write h) and two residual adds (read 2 h, write h); the QKV split copies Q, K and V (2 + 2 per element); RoPE
    on Q and K: float() 2 + 4, complex product 4 + 4, type_as 4 + 2 = 20 bytes per element; SwiGLU: silu (read F,
    write F) and the product (read 2 F, write F)."""
    b = torchtitan_block_bytes(LLAMA8, tp=1, sp=False, dtype_bytes=2, compiled=False)
    assert b.norms_residuals == 2 * (2 + 2) * 4096 + 2 * (4 + 2) * 4096
    assert b.rope == 4 * (4096 + 1024 + 1024) + 20 * (4096 + 1024)
    assert b.activation == (2 + 2 + 4 + 2) * 14336
    assert b.total == 352_256


def test_compiled_llama3_8b_block_by_hand():
    """One read of the inputs and one write of the outputs per fused region: norm 1 (2 + 2), residual 1 with norm 2
    (read x and the attention output, write h and the norm's output: 4 + 4), residual 2 (4 + 2), RoPE reading Q and
    K from the split (2 + 2 per element), V's copy (2 + 2), SwiGLU (read w1 and w3 outputs, write the product:
    4 + 2)."""
    b = torchtitan_block_bytes(LLAMA8, tp=1, sp=False, dtype_bytes=2, compiled=True)
    assert b.norms_residuals == (4 + 8 + 6) * 4096
    assert b.rope == 4 * (4096 + 1024) + 4 * 1024
    assert b.activation == 6 * 14336
    assert b.total == 184_320


def test_tensor_parallel_shards_heads_and_ffn_and_sequence_parallel_the_norms():
    whole = torchtitan_block_bytes(LLAMA70, 1, False, 2, True)
    tp8 = torchtitan_block_bytes(LLAMA70, 8, False, 2, True)
    sp8 = torchtitan_block_bytes(LLAMA70, 8, True, 2, True)
    assert (tp8.rope, tp8.activation) == (whole.rope / 8, whole.activation / 8)
    assert tp8.norms_residuals == whole.norms_residuals  # every TP rank runs them on every token without SP
    assert sp8.norms_residuals == whole.norms_residuals / 8


@pytest.mark.parametrize("degrees", [Degrees(1, 1, 1, 1, 2, False), Degrees(8, 1, 1, 1, 1, True),
                                     Degrees(4, 2, 1, 1, 1, True)])
@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_compile_is_never_slower_and_leaves_the_gemms_and_attention_as_they_are(degrees, mode):
    cluster = ClusterSpec(H100, 64)
    key = LayerKey("dense", mode, degrees)
    eager, compiled = (layer_time(LLAMA70, cluster, r, key) for r in (EAGER, COMPILED))
    assert compiled.total < eager.total
    assert compiled.wgrad == eager.wgrad and compiled.flops == eager.flops  # GEMMs (and their FLOPs) unchanged
    tokens = degrees.tokens(EAGER.seq_len)
    saved = tokens * (torchtitan_block_bytes(LLAMA70, degrees.tp, degrees.sp, 2, False).total
                      - torchtitan_block_bytes(LLAMA70, degrees.tp, degrees.sp, 2, True).total) / H100.hbm_bandwidth
    assert eager.forward - compiled.forward == pytest.approx(saved)  # fusion is all that changes
    assert eager.backward - compiled.backward == pytest.approx(2 * saved)


def test_a_compiled_step_is_faster_than_the_eager_one():
    cluster = ClusterSpec(H100, 8)
    strategy = Strategy(dp=8, mbs=2, mbn=1, zero=3, recompute=RecomputePlan.uniform("selective"))
    eager, compiled = (estimate_time(LLAMA8, cluster, r, strategy).step_seconds for r in (EAGER, COMPILED))
    assert compiled < eager


def test_layers_torchtitan_does_not_build_as_a_dense_block_keep_megatrons_count_and_no_compile_gain():
    """MoE layers are priced with Megatron's fused kernels eager and compiled alike (conservative, unvalidated)."""
    for model, kind in ((MIXTRAL, "moe"),):
        assert not torchtitan_counted(model, COMPILED, kind)
        both = {layer_elementwise_bytes(model, r, kind, 4096, 8192, 1, False) for r in (EAGER, COMPILED)}
        assert both == {elementwise_bytes(model, kind, 4096, 8192, 1, False, True, 2)}


def test_megatron_runs_keep_the_fused_kernel_count():
    run = RunSpec(global_batch=16, seq_len=8192)
    assert not torchtitan_counted(LLAMA8, run, "dense")
    assert layer_elementwise_bytes(LLAMA8, run, "dense", 8192, 8192, 1, False) == \
        elementwise_bytes(LLAMA8, "dense", 8192, 8192, 1, False, True, 2)


def test_without_flash_attention_the_score_passes_are_added_to_either_count():
    eager = dataclasses.replace(EAGER, flash_attention=False)
    scores = (elementwise_bytes(LLAMA8, "dense", 8192, 8192, 1, False, False, 2)
              - elementwise_bytes(LLAMA8, "dense", 8192, 8192, 1, False, True, 2))
    assert layer_elementwise_bytes(LLAMA8, eager, "dense", 8192, 8192, 1, False) == 8192 * 352_256 + scores
