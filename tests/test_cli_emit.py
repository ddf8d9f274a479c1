"""--emit on `ndcp estimate`, `ndcp search` and `ndcp recompute`: the printed configuration parses (Megatron flags
with argparse, torchtitan TOML with tomllib, MindFormers YAML with yaml) and carries the strategy."""
import argparse
import shlex
import tomllib

import yaml

from ndcp.cli import main

TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]
ESTIMATE = ["estimate", *TINY, "--strategy", "tp=2,pp=2,mbs=1,zero=1,sp=on,recompute=selective"]


def megatron_args(text: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
                 "--global-batch-size", "--seq-length"):
        parser.add_argument(flag, type=int)
    args, _ = parser.parse_known_args(shlex.split(text.replace("\\\n", " "), comments=True))
    return args


def emitted(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_estimate_emit_megatron(capsys):
    out = emitted(capsys, *ESTIMATE, "--json", "/dev/null", "--emit", "megatron")
    args = megatron_args(out[out.index("--"):] if out.startswith("#") else out)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (2, 2)
    assert (args.micro_batch_size, args.global_batch_size, args.seq_length) == (1, 32, 1024)


def test_estimate_emit_file_torchtitan(capsys, tmp_path):
    path = tmp_path / "train.toml"
    main([*ESTIMATE, "--emit", "torchtitan", "--emit-file", str(path)])
    _, err = capsys.readouterr()
    doc = tomllib.loads(path.read_text())
    assert doc["parallelism"]["tensor_parallel_degree"] == 2
    assert doc["parallelism"]["pipeline_parallel_degree"] == 2
    assert "wrote the torchtitan configuration" in err


def test_search_emit_winner(capsys):
    out = emitted(capsys, "search", *TINY, "-q", "--emit", "torchtitan")
    first, _, rest = out.partition("\n")
    assert first.startswith("optimal: ")
    doc = tomllib.loads(rest)
    assert doc["training"]["global_batch_size"] == 32


def test_search_emit_mindformers_with_json_needs_file(capsys, tmp_path):
    code = main(["search", *TINY, "--json", "-", "--emit", "mindformers"])
    _, err = capsys.readouterr()
    assert code == 2 and "--emit-file" in err
    path = tmp_path / "mf.yaml"
    code = main(["search", *TINY, "--json", "-", "--emit", "mindformers", "--emit-file", str(path)])
    capsys.readouterr()
    assert code == 0
    assert isinstance(yaml.safe_load(path.read_text()), dict)


def test_recompute_emit_megatron(capsys):
    out = emitted(capsys, "recompute", "llama3-8b", "--device", "h100", "--gpus", "64", "--global-batch", "256",
                  "--seq-len", "8192", "--strategy", "tp=2,pp=4,mbs=2,zero=1,sp=on", "--caps", "20GiB",
                  "--json", "/dev/null", "--emit", "megatron")
    text = out[out.index("--num-layers"):]
    args = megatron_args(text)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (2, 4)


def test_emit_file_without_emit(capsys):
    code = main([*ESTIMATE, "--emit-file", "/tmp/x"])
    _, err = capsys.readouterr()
    assert code == 2 and "--emit-file needs --emit" in err


def test_an_emitter_says_when_the_plan_assumed_another_trainers_memory(capsys):
    from ndcp.report.emit import emit
    from ndcp.specs import RunSpec
    from ndcp.specs.library import load_model
    from ndcp.specs.strategy import Strategy

    model, strategy = load_model("llama3-8b"), Strategy(dp=8, mbs=1, mbn=4, zero=3)
    megatron_run = RunSpec(global_batch=32, seq_len=4096)
    titan_run = RunSpec(global_batch=32, seq_len=4096, trainer="torchtitan")
    assert any("--trainer torchtitan" in n for n in emit("torchtitan", model, megatron_run, strategy).notes)
    assert not any("--trainer" in n for n in emit("torchtitan", model, titan_run, strategy).notes)
    assert any("--trainer megatron" in n for n in emit("megatron", model, titan_run, strategy).notes)
