"""The model library: names, YAML/JSON loading and one-line SpecErrors for bad input."""
import json
import pickle

import pytest
import yaml

from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, SpecError, device_preset
from ndcp.specs.library import library_names, list_models, load_model

REQUIRED = ["gpt3-175b", "llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b", "mixtral-8x7b",
            "mixtral-8x22b", "qwen2.5-72b", "qwen3-235b-a22b", "deepseek-v3", "tiny", "tiny-moe"]


def test_library_has_required_models():
    names = library_names()
    assert names == sorted(names)
    assert set(REQUIRED) <= set(names)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_library_model_loads_with_source(name):
    model = load_model(name)
    assert isinstance(model, ModelSpec)
    assert model.name == name  # file name = library name = spec name
    assert model.source.strip()
    assert model.parameters > 0


def test_list_models_sorted():
    models = list_models()
    assert [m.name for m in models] == sorted(m.name for m in models)
    assert {m.name for m in models} == set(library_names())


def test_gpt3_shape():
    m = load_model("gpt3-175b")
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab) == (96, 12288, 96, 49152, 51200)
    assert (m.position_embedding, m.max_positions, m.activation, m.norm) == ("learned", 2048, "gelu", "layernorm")
    assert m.linear_bias and m.tied_embeddings
    assert (m.attention_dropout, m.hidden_dropout) == (0.1, 0.1)


def test_tiny_models_are_small():
    tiny, tiny_moe = load_model("tiny"), load_model("tiny-moe")
    assert tiny.moe is None and tiny.parameters < 10_000_000
    assert tiny_moe.moe is not None and tiny_moe.layers == 4
    assert (tiny_moe.moe.experts, tiny_moe.moe.top_k, tiny_moe.moe.first_dense_layers) == (8, 2, 1)
    assert tiny_moe.dense_layers == 1 and tiny_moe.moe_layers == 3


def test_unknown_name_lists_library():
    with pytest.raises(SpecError) as error:
        load_model("llama9-1t")
    message = str(error.value)
    assert "llama9-1t" in message and "llama3-8b" in message and "tiny" in message
    assert "\n" not in message


def test_yaml_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 100,
                                    "source": "test"}))
    model = load_model(str(path))
    assert model.name == "mine"  # defaults to the file stem
    assert model.layers == 2


def test_yaml_path_roundtrip_library_model(tmp_path):
    library = load_model("mixtral-8x7b")
    data = {f.name: getattr(library, f.name) for f in library.__dataclass_fields__.values()}
    data["moe"] = {k: getattr(library.moe, k) for k in library.moe.__dataclass_fields__}
    data["mla"] = None
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_model(str(path)) == library


def test_missing_file():
    with pytest.raises(SpecError, match="cannot read"):
        load_model("/nonexistent/dir/model.yaml")


def test_directory_is_not_a_spec(tmp_path):
    with pytest.raises(SpecError, match="directory"):
        load_model(str(tmp_path) + "/")


def test_bad_yaml_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("layers: 2\nhidden: [64\nheads: 4\n")
    with pytest.raises(SpecError) as error:
        load_model(str(path))
    message = str(error.value)
    assert "invalid YAML" in message and "line" in message and "\n" not in message
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_yaml_must_be_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="mapping"):
        load_model(str(path))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SpecError, match="mapping"):
        load_model(str(empty))


def test_unknown_key_named(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("layers: 2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\nhiden: 3\n")
    with pytest.raises(SpecError, match="hiden"):
        load_model(str(path))


def test_bad_value_named(tmp_path):
    path = tmp_path / "neg.yaml"
    path.write_text("layers: -2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\n")
    with pytest.raises(SpecError, match="layers"):
        load_model(str(path))


def test_yaml_is_safe_loaded(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("layers: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(SpecError, match="invalid YAML"):
        load_model(str(path))


def test_hf_config_json_path(tmp_path):
    folder = tmp_path / "Mixtral-8x7B-v0.1"
    folder.mkdir()
    config = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
              "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
              "tie_word_embeddings": False, "hidden_act": "silu"}
    (folder / "config.json").write_text(json.dumps(config))
    model = load_model(str(folder / "config.json"))
    assert model.name == "Mixtral-8x7B-v0.1"
    assert model.parameters == load_model("mixtral-8x7b").parameters


def test_hf_config_detected_by_model_type(tmp_path):
    path = tmp_path / "llama.yaml"
    path.write_text(yaml.safe_dump({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
                                    "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 688,
                                    "vocab_size": 1024, "max_position_embeddings": 2048}))
    model = load_model(str(path))
    assert model.parameters == load_model("tiny").parameters


def test_bad_json_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",,}')
    with pytest.raises(SpecError) as error:
        load_model(str(path))
    assert "invalid JSON" in str(error.value) and "\n" not in str(error.value)


def test_json_without_model_type(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 8}')
    with pytest.raises(SpecError, match="model_type"):
        load_model(str(path))


def test_a_pickled_spec_leaves_its_cached_hash_behind():
    # hashes of strings differ between processes: a spec sent to a spawned worker must hash there as a spec built
    # there does, so the hash cached here may not travel with it
    vision, device = load_model("llava-1.5-7b"), device_preset("h100")
    specs = [load_model("deepseek-v3"), vision, vision.encoder, device, ClusterSpec(device, 8),
             RunSpec(global_batch=8, seq_len=1024)]
    for spec in specs:
        hash(spec)
        assert "_hash" in spec.__dict__
        copy = pickle.loads(pickle.dumps(spec))
        assert copy == spec and "_hash" not in copy.__dict__ and hash(copy) == hash(spec)
