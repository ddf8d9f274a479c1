"""A measured run's model is read by the library's schema (ndcp/validation/run_model.py)."""
from pathlib import Path

import pytest
import yaml

from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.validation.run_model import read_model, row_seq_len
from ndcp.validation.values import SkipRun

HERE = Path(__file__).resolve().parent  # a runs file's folder
EXAMPLES = HERE.parents[1] / "examples"


def _read(model, **entry):
    notes = []
    return read_model({"model": model, **entry}, 4096, HERE, notes), notes


def test_every_library_field_is_read_head_dim_etc():
    model, _ = _read({"name": "Qwen3-30B-A3B", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4,
                      "head_dim": 128, "ffn_hidden": 6144, "vocab": 151936, "activation": "swiglu",
                      "params_b": 30.5, "model_source": "config", "seq_len": 4096,
                      "moe": {"experts": 128, "top_k": 8, "expert_ffn_hidden": 768, "first_dense_layers": 1},
                      "sliding_window": 128, "global_every": 2})
    assert model.dim_per_head == 128 != model.hidden // model.heads
    assert model.moe.first_dense_layers == 1 and model.moe_layers == 47
    assert model.sliding_window == 128 and model.local_layers == 24


@pytest.mark.parametrize("activation", ["squared_relu", "geglu", "relu"])
def test_every_activation_of_modelspec(activation):
    model, _ = _read({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 100,
                      "activation": activation})
    assert model.activation == activation
    assert (model.position_embedding == "learned") is (activation == "relu")  # OPT is GPT-style


def test_gpt_conventions_are_noted():
    model, notes = _read({"name": "GPT-3 5B", "layers": 24, "hidden": 4096, "heads": 32, "vocab": 51200})
    assert model.activation == "gelu" and model.ffn_hidden == 4 * 4096 and model.tied_embeddings
    assert {"activation gelu (GPT)", "ffn_hidden 4h", "kv_heads = heads"} <= set(notes)


def test_an_unknown_model_key_is_refused_with_the_valid_ones():
    with pytest.raises(SpecError, match=r"model\.moe\.'dense_prefix': unknown key; valid keys: .*first_dense_layers"):
        _read({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 100,
               "activation": "swiglu", "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 64, "dense_prefix": 1}})


def test_unpublished_required_field_skips():
    with pytest.raises(SkipRun, match="model.vocab is not published"):
        _read({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": None,
               "activation": "swiglu"})


def test_library_name_and_model_file(tmp_path):
    assert _read("deepseek-v3")[0] == load_model("deepseek-v3")
    (tmp_path / "tiny_model.yaml").write_text("layers: 2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\n")
    model = read_model({"model_file": "tiny_model.yaml"}, 1024, tmp_path, [])  # relative to the runs file
    assert model.name == "tiny_model" and model.layers == 2
    with pytest.raises(SpecError, match="model_file"):
        read_model({"model_file": "x.yaml", "model": {"layers": 2}}, 1024, tmp_path, [])


def test_seq_len_from_training_or_the_model_mapping():
    assert row_seq_len({"training": {"seq_len": 8192}, "model": "llama3-8b"}) == 8192
    assert row_seq_len({"training": {}, "model": {"seq_len": 2048}}) == 2048
    assert row_seq_len({"training": {}, "model": "llama3-8b"}) is None


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-235b-a22b", "llama4-scout", "gpt3-175b", "mixtral-8x7b",
                                  "nemotron-3-nano"])
def test_a_library_model_written_out_as_a_mapping_reads_back_the_same(name):
    """The runs file's model mapping is the library's schema: every field of a library model, written as a
    mapping, reads back as the same ModelSpec (so nothing a model can say is lost in validation)."""
    import dataclasses

    library = load_model(name)
    mapping = {f.name: getattr(library, f.name) for f in dataclasses.fields(library)}
    mapping = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in mapping.items()}
    assert read_model({"model": mapping}, 4096, HERE, []) == library


@pytest.mark.parametrize("runs_file, count", [("measured_runs_2.yaml", 4), ("measured_runs_nvl72.yaml", 5)])
def test_the_nemotron_3_nano_rows_are_priced_as_the_hybrid_library_model(runs_file, count):
    """The Megatron-Bridge Nemotron-3 Nano rows name the library model: Mamba-2, attention and MoE blocks reach the
    estimators as the library states them (no mapping that could drop the layer pattern)."""
    rows = [r for r in yaml.safe_load((EXAMPLES / runs_file).read_text())["runs"] if "nemotron3_nano" in r["id"]]
    assert len(rows) == count
    for row in rows:
        model = read_model(row, row_seq_len(row), EXAMPLES, [])
        assert model == load_model("nemotron-3-nano") and model.hybrid_blocks and model.mamba is not None
        assert row_seq_len(row) == 8192
