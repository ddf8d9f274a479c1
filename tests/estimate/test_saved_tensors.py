"""ndcp's torchtitan activation inventory against what torchtitan's own block keeps, measured.

docs/saved_tensors.yaml is written by scripts/measure_saved_tensors.py, which runs torchtitan's Llama 3 block (the
trainer's code, at real sizes, on the meta device) under each activation-checkpoint policy and sums the storages
autograd keeps after the forward, and for the 8B rows the most bytes alive through forward and backward. Rows of
torchtitan 3f20451b (the Dec 2024 benchmark's code) say what compile changes on the code the measured rows ran. The
table is committed; this test reads it and does not need torch.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ndcp.estimate.activations import (backward_workspace_bytes, layer_activation_bytes, layer_workspace_bytes,
                                       op_sac_recomputed_mms)
from ndcp.estimate.keys import Degrees
from ndcp.specs import RunSpec
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.specs.trainer_behaviour import TORCHTITAN

TABLE = yaml.safe_load((Path(__file__).parents[2] / "docs" / "saved_tensors.yaml").read_text())
# the rows of the torchtitan code ndcp prices with a fused wqkv (0.3.0), of the code it prices with separate wq, wk,
# wv (e7c0cae, the Trainy H200 benchmark's: RunSpec.qkv_projections separate), and of the Dec 2024 benchmark's code
PRICED = [row for row in TABLE["rows"] if row["code"] == "0.3.0"]
SEPARATE = [row for row in TABLE["rows"] if row["code"] == "e7c0cae"]
DEC2024 = {(r["policy"], r["compiled"]): r for r in TABLE["rows"] if r["code"] == "3f20451b"}
# scalars the inventory does not list: the attention kernel's philox seed and offset (24 bytes), FP8 amax and scale
# values (4 bytes each, a few per linear: 70 bytes on e7c0cae's seven FP8 linears compiled)
SCALAR_BYTES = 96


def test_the_table_is_of_the_version_the_behaviour_names():
    version = re.search(r"torchtitan ([0-9.]+)", TABLE["versions"]).group(1)
    assert TABLE["trainer"] == "torchtitan" and version in TORCHTITAN.version
    assert {row["policy"] for row in PRICED} == {"none", "selective", "full"}
    assert {row["precision"] for row in PRICED} == {"bf16", "fp8"}


def _row_run(row) -> RunSpec:
    """The run a measured row's block ran: its precision and compile, and its code's Q/K/V projections."""
    return RunSpec(global_batch=8, seq_len=TABLE["seq_len"], trainer="torchtitan", precision=row["precision"],
                   torch_compile=row["compiled"], qkv_projections="separate" if row["code"] == "e7c0cae" else "fused")


@pytest.mark.parametrize("row", PRICED + SEPARATE,
                         ids=lambda r: f"{r['code']}-{r['model']}-{r['precision']}-{r['policy']}-{r['compiled']}")
def test_inventory_equals_the_measured_bytes(row):
    model = load_model(row["model"])
    sizes = row["sizes"]
    assert (model.hidden, model.heads, model.num_kv_heads, model.dim_per_head, model.ffn_hidden) == (
        sizes["hidden"], sizes["heads"], sizes["kv_heads"], sizes["head_dim"], sizes["ffn_hidden"])
    run = _row_run(row)
    degrees = Degrees(TABLE["tp"], TABLE["cp"], 1, 1, TABLE["micro_batch"], False)
    estimated = layer_activation_bytes(model, run, "dense", row["policy"], degrees)
    assert 0 <= row["activation_bytes"] - estimated <= SCALAR_BYTES


def test_torchtitan_fp8_keeps_the_bf16_activations():
    # torchao Float8Linear saves its high-precision input for backward (float8_linear.py, save_for_backward(input_hp,
    # weight_hp_t)), so FP8 training in torchtitan keeps what BF16 keeps, measured to the amax scalars
    measured = {(r["precision"], r["policy"]): r["activation_bytes"] for r in PRICED
                if r["model"] == "llama3-8b" and not r["compiled"]}
    for policy in ("none", "selective"):
        assert 0 <= measured["fp8", policy] - measured["bf16", policy] <= SCALAR_BYTES


def test_torchtitan_fp8_under_compile_keeps_the_bf16_selective_activations():
    # the policy counts torchao's Float8 mm as an aten.mm (its _scaled_mm runs beneath, tagged as the mm): the compiled
    # forward saves the same bf16 mm outputs, plus amax scalars
    rows = {r["precision"]: r["activation_bytes"] for r in PRICED
            if r["model"] == "llama3-8b" and r["compiled"] and r["policy"] == "selective"}
    assert 0 < rows["fp8"] - rows["bf16"] <= SCALAR_BYTES


def test_the_backward_reruns_what_ndcp_prices():
    # every linear's input- and weight-gradient GEMMs, and what the checkpoint re-runs: op-level SAC the forward GEMMs
    # of every second mm (estimate/rerun.py: 0.3.0's wo and w3) and no attention kernel, eager and compiled, BF16 and
    # FP8 (aten.mm, or aten._scaled_mm in the compiled FP8 graph); full AC the whole forward, the attention kernel
    # with it (docs/formulas.md §5.7)
    from ndcp.estimate.activations import block_mms
    assert {(r["precision"], r["policy"], r["compiled"]) for r in PRICED} >= {
        (p, "selective", c) for p in ("bf16", "fp8") for c in (False, True)}
    for row in PRICED + SEPARATE:
        model, run = load_model(row["model"]), _row_run(row)
        mms = block_mms(model, run)
        rerun = {"none": (), "selective": op_sac_recomputed_mms(model, run), "full": mms}[row["policy"]]
        # e7c0cae's full AC (checkpoint_wrapper's default early stop; 0.3.0's FullAC sets early_stop=False) stops
        # its re-run once the backward's saved tensors are rebuilt: w2, whose output no gradient reads, does not
        # re-run. ndcp re-runs the whole forward: one GEMM over, conservative
        early_stop = int(row["code"] == "e7c0cae" and row["policy"] == "full")
        assert row["backward_gemms"] == 2 * len(mms) + len(rerun) - early_stop
        assert row["backward_attention_forwards"] == (row["policy"] == "full")
    assert op_sac_recomputed_mms(load_model("llama3-8b"), RunSpec(global_batch=8, seq_len=8192,
                                                                  trainer="torchtitan")) == ("wo", "w3")


def test_full_checkpoint_keeps_only_the_block_input():
    for row in TABLE["rows"]:
        if row["policy"] == "full":
            assert [name for name, _ in row["tensors"]] == ["block_input"]


def test_torch_compile_recomputes_the_mlp_activation():
    # AOTAutograd's min-cut partitioner (what Inductor uses for training) saves w1's and w3's outputs and their
    # product, and recomputes SiLU: one ffn-wide bf16 tensor less than eager, on both models
    rows = {(r["model"], r["compiled"]): r for r in PRICED if r["policy"] == "none" and r["precision"] == "bf16"}
    for name in ("llama3-8b", "llama3-70b"):
        ffn = rows[name, False]["sizes"]["ffn_hidden"]
        saved_less = rows[name, False]["activation_bytes"] - rows[name, True]["activation_bytes"]
        assert saved_less == 2 * TABLE["seq_len"] * TABLE["micro_batch"] * ffn


def test_torch_compile_is_torchtitans():
    with pytest.raises(SpecError, match="torch_compile"):
        RunSpec(global_batch=8, seq_len=128, torch_compile=True)


def _tensor_bytes(row) -> list[int]:
    return sorted(b for _, b in row["tensors"])


def test_torch_compile_under_selective_checkpoint_drops_the_w2_output_on_both_codes():
    # the op-level policy tags every second mm's output to save, but the partitioned forward returns only what the
    # backward reads: w2's output (h wide, read by no gradient) is the one tensor compile drops, on 0.3.0's block
    # and on the Dec 2024 block (separate wq/wk/wv, fp32 RMSNorm); 8 KiB a token a layer, 4 GiB on the 8B rows
    # (32 layers, 16,384 tokens a GPU), the bulk of their measured 5.4
    h_bytes = 2 * TABLE["seq_len"] * TABLE["micro_batch"] * 4096
    rows = {(r["policy"], r["compiled"]): r for r in PRICED if r["model"] == "llama3-8b" and r["precision"] == "bf16"}
    for table in (rows, DEC2024):
        eager, compiled = _tensor_bytes(table["selective", False]), _tensor_bytes(table["selective", True])
        dropped = list(eager)
        for nbytes in compiled:
            dropped.remove(nbytes)
        assert [b for b in dropped if b] == [h_bytes]


def test_the_backward_temporaries_are_what_the_eager_peak_adds_to_everything_saved():
    # through an eager block's backward the no-checkpoint set is alive again (0.3.0's SAC peak is its no-AC peak)
    # plus the backward's temporaries, the same on both codes: ndcp's recompute workspace counts the first
    # (none - selective), backward_workspace_bytes the second (docs/formulas.md §5.5)
    rows = {(r["policy"], r["compiled"]): r for r in PRICED if r["model"] == "llama3-8b" and r["precision"] == "bf16"}
    temporaries = {table["none", False]["peak_bytes"] - table["none", False]["activation_bytes"]
                   for table in (rows, DEC2024)}
    tokens, ffn = TABLE["seq_len"] * TABLE["micro_batch"], rows["none", False]["sizes"]["ffn_hidden"]
    assert temporaries == {2 * tokens * (2 * ffn + 4096)}  # as many bytes as two ffn-wide and one h-wide bf16
    assert rows["selective", False]["peak_bytes"] == rows["none", False]["peak_bytes"]


PEAKS = TABLE["backward_peaks"]  # 0.3.0's eager 8B bf16 block: what is alive at its peak, at two token counts


def _run(tokens: int, compiled: bool = False) -> RunSpec:
    return RunSpec(global_batch=8, seq_len=tokens, trainer="torchtitan", torch_compile=compiled)


@pytest.mark.parametrize("row", PEAKS, ids=lambda r: f"{r['tokens']}-{r['policy']}")
def test_the_peak_is_what_the_layer_keeps_plus_its_workspace(row):
    # the measured peak of one block's forward and backward = what it keeps + what its recompute rebuilds + the
    # backward's temporaries (activations.layer_workspace_bytes), under every policy and at both token counts
    llama, run = load_model("llama3-8b"), _run(row["tokens"])
    degrees = Degrees(1, 1, 1, 1, 1, False)
    kept = layer_activation_bytes(llama, run, "dense", row["policy"], degrees)
    assert 0 <= row["saved_bytes"] - kept <= SCALAR_BYTES
    priced = kept + layer_workspace_bytes(llama, run, "dense", row["policy"], degrees)
    assert 0 <= row["peak_bytes"] - priced <= SCALAR_BYTES


def test_the_backward_temporaries_are_linear_in_the_tokens_and_the_same_under_every_policy():
    peaks = {(r["tokens"], r["policy"]): r["peak_bytes"] for r in PEAKS}
    for policy in ("none", "selective", "full"):
        for tokens in (8192, 4096):
            assert peaks[tokens, policy] == peaks[tokens, "none"]
        assert 0 <= 2 * peaks[4096, policy] - peaks[8192, policy] <= SCALAR_BYTES  # the scalars do not scale


def test_the_inventory_at_the_peak_is_swiglus_backward():
    # hand count at the peak (SiLU-multiply's backward): beside the saved set, the output gradient (T x h, which the
    # script makes), the product's gradient from w2's backward and its two gradients (T x F each); the product
    # itself (w2's input, T x F) is gone with w2's backward node
    row = next(r for r in PEAKS if (r["tokens"], r["policy"]) == (8192, "none"))
    tokens, h, ffn = 8192, 4096, 14336
    made = sorted(b for phase, _, b in row["alive"] if phase == "backward")
    assert made == [2 * tokens * ffn] * 3
    assert ["aten.empty_like.default", 2 * tokens * h] in [[op, b] for _, op, b in row["alive"]]
    products = [b for phase, op, b in row["alive"] if phase == "forward" and op == "aten.mul.Tensor"]
    assert 2 * tokens * ffn not in products  # the saved SwiGLU product is freed
    assert row["peak_bytes"] - row["saved_bytes"] == 2 * tokens * (h + 2 * ffn)
    assert backward_workspace_bytes(load_model("llama3-8b"), _run(tokens), "dense",
                                    Degrees(1, 1, 1, 1, 1, False)) == 2 * tokens * (h + 2 * ffn)


def test_compiled_temporaries_are_priced_within_the_node_by_node_bound():
    # compiled, the partitioned graphs run node by node (an upper bound for Inductor's fused code): no AC, the peak
    # is at most the bound (the recomputed SiLU output, fused by Inductor, is the T x F the bound has beyond the
    # price); SAC, the priced peak covers the measured one
    llama, run = load_model("llama3-8b"), _run(8192, compiled=True)
    degrees = Degrees(1, 1, 1, 1, 1, False)
    rows = {r["policy"]: r for r in PRICED if r["model"] == "llama3-8b" and r["precision"] == "bf16" and r["compiled"]}
    for policy, row in rows.items():
        priced = (layer_activation_bytes(llama, run, "dense", policy, degrees)
                  + layer_workspace_bytes(llama, run, "dense", policy, degrees))
        assert (priced <= row["peak_bytes"]) if policy == "none" else (priced >= row["peak_bytes"])
    none = rows["none"]
    assert none["peak_bytes"] - none["activation_bytes"] - backward_workspace_bytes(llama, run, "dense", degrees) \
        == 2 * 8192 * 14336


MEGATRON = TABLE["megatron_backward_peaks"]  # Megatron-Core d98e8a6's local-spec layer, Llama-3-8B sizes, tp 1


def test_megatrons_swiglu_backward_has_the_same_inventory_once_its_halves_are_fused():
    # at Megatron's peak (swiglu_back's torch.cat): the layer's output gradient, fc2's input gradient, the
    # concatenated [T, 2F] gradient and, on the meta device where swiglu_back runs eagerly, its two halves; the
    # SwiGLU output (fc2's saved input) is freed. On a GPU Megatron compiles swiglu_back (core/jit.py jit_fuser =
    # torch.compile) and Inductor writes the halves into the concatenated output: the price is the rest, torchtitan's
    llama = load_model("llama3-8b")
    for row in MEGATRON:
        tokens, h, ffn = row["tokens"], 4096, 14336
        made = sorted(b for phase, _, b in row["alive"] if phase == "backward")
        assert made == [2 * tokens * ffn] * 3 + [2 * tokens * 2 * ffn]
        halves = 2 * (2 * tokens * ffn)
        run = RunSpec(global_batch=8, seq_len=tokens)
        priced = backward_workspace_bytes(llama, run, "dense", Degrees(1, 1, 1, 1, 1, False))
        assert row["peak_bytes"] - row["saved_bytes"] - halves == priced == 2 * tokens * (h + 2 * ffn)
    assert [r["tokens"] for r in MEGATRON] == [8192, 4096]
    assert abs(MEGATRON[0]["peak_bytes"] - 2 * MEGATRON[1]["peak_bytes"]) <= SCALAR_BYTES


def test_the_dec2024_code_explains_the_measured_compile_saving():
    # benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd: 82.4 GiB eager, 77.0 compiled (FSDP 8, local batch 2,
    # 32 layers): the saved-tensor drop on every layer plus the one backward transient, as measured on the Dec 2024
    # block, is 5.2 GiB of the 5.4 (0.3.0's block: 4.4, of which ndcp prices the saved-tensor drop)
    def saving(table) -> float:
        eager, compiled = table["selective", False], table["selective", True]
        saved = eager["activation_bytes"] - compiled["activation_bytes"]
        transient = (eager["peak_bytes"] - eager["activation_bytes"]) - (compiled["peak_bytes"]
                                                                           - compiled["activation_bytes"])
        return 2 * (32 * saved + transient) / 2**30
    rows = {(r["policy"], r["compiled"]): r for r in PRICED if r["model"] == "llama3-8b" and r["precision"] == "bf16"}
    assert 5.0 < saving(DEC2024) < 5.4 and 4.2 < saving(rows) < 4.6


def _by(rows, precision: str, policy: str, compiled: bool):
    return next(r for r in rows if (r["precision"], r["policy"], r["compiled"]) == (precision, policy, compiled))


def test_separate_projections_save_wq_wv_w1_and_w2_outputs_under_selective_checkpoint():
    # e7c0cae's block calls wq, wk, wv, wo, w1, w3, w2: the op-level policy saves the 1st, 3rd, 5th and 7th mm's
    # output (wq: T x a d, wv: T x g d, w1: T x F, w2: T x h) and re-runs wk, wo, w3; compiled, w2's is dropped
    # (no gradient reads it), as on 0.3.0's block. The same saved set as the Dec 2024 block (3f20451b)
    llama = load_model("llama3-8b")
    tokens, h, ffn = TABLE["seq_len"] * TABLE["micro_batch"], llama.hidden, llama.ffn_hidden
    q, kv = llama.heads * llama.dim_per_head, llama.num_kv_heads * llama.dim_per_head
    eager = _by(SEPARATE, "bf16", "selective", False)
    assert sorted(b for op, b in eager["tensors"] if op == "aten.mm.default") == sorted(
        2 * tokens * n for n in (q, kv, ffn, h))
    assert op_sac_recomputed_mms(llama, _row_run(eager)) == ("wk", "wo", "w3")
    assert eager["activation_bytes"] == DEC2024["selective", False]["activation_bytes"]
    compiled = _by(SEPARATE, "bf16", "selective", True)
    assert eager["activation_bytes"] - compiled["activation_bytes"] == 2 * tokens * h


def test_separate_projections_expand_k_and_v_without_checkpoint():
    # e7c0cae repeats K and V to the query heads (repeat_kv) before attention, whose kernel keeps the expanded copies:
    # without AC the block keeps 2 x (a - g) d x T bf16 more than 0.3.0's (enable_gqa), eager and compiled
    llama = load_model("llama3-8b")
    tokens = TABLE["seq_len"] * TABLE["micro_batch"]
    more = 2 * 2 * tokens * (llama.heads - llama.num_kv_heads) * llama.dim_per_head
    for precision, compiled in (("bf16", False), ("bf16", True), ("fp8", True)):
        fused, separate = _by(PRICED, precision, "none", compiled), _by(SEPARATE, precision, "none", compiled)
        assert abs(separate["activation_bytes"] - fused["activation_bytes"] - more) <= SCALAR_BYTES


def test_fp8_under_compile_without_checkpoint_keeps_fp8_wo_input_and_recomputes_the_norms_and_the_product():
    # torchao Float8Linear under torch.compile, no AC: the partitioner keeps neither norm output (T x h bf16 each) nor
    # the SwiGLU product (T x F), which it recomputes with their FP8 casts, and keeps wo's FP8 input (T x a d, 1
    # byte) for wo's weight gradient: 806 MB where compiled BF16 keeps 1,142 MB (Llama-3-8B, 8,192 tokens)
    llama = load_model("llama3-8b")
    tokens, h, ffn = TABLE["seq_len"] * TABLE["micro_batch"], llama.hidden, llama.ffn_hidden
    bf16, fp8 = _by(PRICED, "bf16", "none", True), _by(PRICED, "fp8", "none", True)
    dropped = 2 * tokens * (2 * h + ffn) - tokens * llama.heads * llama.dim_per_head
    assert 0 <= fp8["activation_bytes"] - (bf16["activation_bytes"] - dropped) <= SCALAR_BYTES
    assert ["saved [8192, 4096] float8_e4m3fn", tokens * h] in [list(t) for t in fp8["tensors"]]
    # the selective policy's saved set is unchanged by FP8 (its mms' outputs are bf16): the rule is no-AC only
    assert _by(SEPARATE, "fp8", "selective", True)["activation_bytes"] - _by(
        SEPARATE, "bf16", "selective", True)["activation_bytes"] <= SCALAR_BYTES
