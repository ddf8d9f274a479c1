"""The strategy keys of issues 13 and 14 on the command line: layout=, first/last stage layers, recompute_modules=,
offload=, and the JSON `strategy.layout` object."""
import json

from .cli_helpers import assert_one_line_error, run

DEEPSEEK = ("estimate", "deepseek-v3", "--device", "h100", "--gpus", "1024", "--global-batch", "8192", "--seq-len",
            "4096")
LLAMA_405B = ("estimate", "llama3.1-405b", "--device", "h100", "--gpus", "2048", "--global-batch", "2048",
              "--seq-len", "8192")


def _strategy(capsys, *args):
    code, out, err = run(capsys, *args, "--json", "-")
    assert code == 0, err
    return json.loads(out)["strategy"]


def test_megatron_layout_notation_sets_the_partition_and_vpp(capsys):
    s = _strategy(capsys, *DEEPSEEK, "--strategy",
                  "tp=2,pp=16,ep=64,etp=1,mbs=1,zero=1,sp=on,recompute=full,layout=Ett|(tt|)*28,(t|)*2,tmL")
    assert s["vpp"] == 2 and s["layers_per_stage"] == [2] * 29 + [1, 1, 1]
    layout = s["layout"]
    assert layout["layers_per_stage"][0] == [2, 2] and layout["layers_per_stage"][15] == [2, 1]
    assert layout["embedding"] == [0, 0] and layout["loss"] == [15, 1] and layout["mtp"] == [15, 1]
    assert layout["split"] == "uneven" and layout["megatron"] == "Ett|(tt|)*28,(t|)*2,tmL"


def test_first_and_last_stage_layers_as_megatron_splits_them(capsys):
    s = _strategy(capsys, *LLAMA_405B, "--strategy",
                  "tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=selective,first_stage_layers=7,last_stage_layers=7")
    # 7 + 14 x 8 + 7 is also the default partition (interior stages take the remainder), so it is not explicit
    assert "layers_per_stage" not in s and s["layout"]["layers_per_stage"] == [[7]] + [[8]] * 14 + [[7]]
    assert s["layout"]["megatron"] == "Et*7|(t*8|)*14,t*7L"
    s = _strategy(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=16,first_stage_layers=6,last_stage_layers=8")
    assert s["layers_per_stage"] == [6] + [8] * 15


def test_the_accounted_and_even_splits_are_named(capsys):
    accounted = _strategy(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=8,cp=2,vpp=8,mbs=1,zero=1,sp=on,recompute=full")
    assert accounted["layout"]["split"] == "accounted" and "layers_per_stage" not in accounted
    even = _strategy(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=2,mbs=1,zero=1,sp=on,recompute=full")
    assert even["layout"]["split"] == "even" and even["layout"]["layers_per_stage"] == [[63], [63]]


def test_uneven_interleaving_needs_no_explicit_partition(capsys):
    s = _strategy(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=8,vpp=3,mbs=1,zero=1,sp=on,recompute=full")
    assert s["layout"]["split"] == "uneven" and sum(map(sum, s["layout"]["layers_per_stage"])) == 126


def test_layout_errors_are_one_line(capsys):
    code, out, err = run(capsys, *DEEPSEEK, "--strategy", "tp=2,pp=16,ep=64,layout=Et*3|(tt|)*29,m|L")
    assert_one_line_error(code, out, err, "last device stage")
    code, out, err = run(capsys, *DEEPSEEK, "--strategy", "tp=2,pp=16,ep=64,vpp=4,layout=Ett|(tt|)*28,(t|)*2,tmL")
    assert_one_line_error(code, out, err, "vpp=4")


def test_recompute_modules_and_offload_keys(capsys):
    s = _strategy(capsys, *DEEPSEEK, "--strategy",
                  "tp=2,pp=16,ep=64,mbs=1,zero=1,sp=on,recompute_modules=moe_act+layernorm+mla_up_proj")
    assert s["recompute"] == "layernorm+mla_up_proj+moe_act"
    s = _strategy(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=16,mbs=1,zero=1,sp=on,offload=activations")
    assert s["recompute"] == "offload"
    code, out, err = run(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=16,recompute_modules=moe_act")
    assert_one_line_error(code, out, err, "moe_act needs moe layers")
    s = _strategy(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=16,zero=1,offload=activations+optimizer")
    assert s["recompute"] == "offload" and s["optimizer_offload"] is True
    code, out, err = run(capsys, *LLAMA_405B, "--strategy", "tp=8,pp=16,offload=optimizer,optimizer_offload=off")
    assert_one_line_error(code, out, err, "disagree")
    code, out, err = run(capsys, *LLAMA_405B, "--trainer", "torchtitan", "--strategy", "tp=8,pp=16,zero=3,recompute=mlp")
    assert_one_line_error(code, out, err, "torchtitan does not run recompute=mlp", "runs none, selective, full")


def test_a_reported_strategy_reads_back_with_its_layout(capsys, tmp_path):
    args = (*DEEPSEEK, "--strategy", "tp=2,pp=16,ep=64,mbs=1,zero=1,sp=on,recompute=full,layout=Ett|(tt|)*28,(t|)*2,tmL")
    code, out, err = run(capsys, *args, "--json", "-")
    assert code == 0, err
    path = tmp_path / "plan.json"
    path.write_text(out)
    again = _strategy(capsys, *DEEPSEEK, "--strategy-file", path)
    assert again == json.loads(out)["strategy"]
