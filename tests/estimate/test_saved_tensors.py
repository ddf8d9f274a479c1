"""ndcp's torchtitan activation inventory against what torchtitan's own block keeps, measured.

docs/saved_tensors.yaml is written by scripts/measure_saved_tensors.py, which runs torchtitan's Llama 3 block (the
trainer's code, at real sizes, on the meta device) under each activation-checkpoint policy and sums the storages
autograd keeps after the forward. The table is committed; this test reads it and does not need torch.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate.keys import Degrees
from ndcp.specs import RunSpec
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.specs.trainer_behaviour import TORCHTITAN

TABLE = yaml.safe_load((Path(__file__).parents[2] / "docs" / "saved_tensors.yaml").read_text())
# scalars the inventory does not list: the attention kernel's philox seed and offset (24 bytes), FP8 amax values
SCALAR_BYTES = 64


def test_the_table_is_of_the_version_the_behaviour_names():
    version = re.search(r"torchtitan ([0-9.]+)", TABLE["versions"]).group(1)
    assert TABLE["trainer"] == "torchtitan" and version in TORCHTITAN.version
    assert {row["policy"] for row in TABLE["rows"]} == {"none", "selective", "full"}
    assert {row["precision"] for row in TABLE["rows"]} == {"bf16", "fp8"}


@pytest.mark.parametrize("row", TABLE["rows"], ids=lambda r: f"{r['model']}-{r['policy']}")
def test_inventory_equals_the_measured_bytes(row):
    model = load_model(row["model"])
    sizes = row["sizes"]
    assert (model.hidden, model.heads, model.num_kv_heads, model.dim_per_head, model.ffn_hidden) == (
        sizes["hidden"], sizes["heads"], sizes["kv_heads"], sizes["head_dim"], sizes["ffn_hidden"])
    run = RunSpec(global_batch=8, seq_len=TABLE["seq_len"], trainer="torchtitan", precision=row["precision"],
                  torch_compile=row["compiled"])
    degrees = Degrees(TABLE["tp"], TABLE["cp"], 1, 1, TABLE["micro_batch"], False)
    estimated = layer_activation_bytes(model, run, "dense", row["policy"], degrees)
    assert 0 <= row["activation_bytes"] - estimated <= SCALAR_BYTES


def test_torchtitan_fp8_keeps_the_bf16_activations():
    # torchao Float8Linear saves its high-precision input for backward (float8_linear.py, save_for_backward(input_hp,
    # weight_hp_t)), so FP8 training in torchtitan keeps what BF16 keeps, measured to the amax scalars
    measured = {(r["precision"], r["policy"]): r["activation_bytes"] for r in TABLE["rows"]
                if r["model"] == "llama3-8b" and not r["compiled"]}
    for policy in ("none", "selective"):
        assert 0 <= measured["fp8", policy] - measured["bf16", policy] <= SCALAR_BYTES


def test_full_checkpoint_keeps_only_the_block_input():
    for row in TABLE["rows"]:
        if row["policy"] == "full":
            assert [name for name, _ in row["tensors"]] == ["block_input"]


def test_torch_compile_recomputes_the_mlp_activation():
    # AOTAutograd's min-cut partitioner (what Inductor uses for training) saves w1's and w3's outputs and their
    # product, and recomputes SiLU: one ffn-wide bf16 tensor less than eager, on both models
    rows = {(r["model"], r["compiled"]): r for r in TABLE["rows"] if r["policy"] == "none" and r["precision"] == "bf16"}
    for name in ("llama3-8b", "llama3-70b"):
        ffn = rows[name, False]["sizes"]["ffn_hidden"]
        saved_less = rows[name, False]["activation_bytes"] - rows[name, True]["activation_bytes"]
        assert saved_less == 2 * TABLE["seq_len"] * TABLE["micro_batch"] * ffn


def test_torch_compile_is_torchtitans():
    with pytest.raises(SpecError, match="torch_compile"):
        RunSpec(global_batch=8, seq_len=128, torch_compile=True)
