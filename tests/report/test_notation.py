"""The plan notation's legend and the text that wraps between a plan's pieces (ndcp/report/notation.py)."""
from rich.console import Console
from rich.text import Text

from ndcp.report.notation import Breakable, break_offsets, plan_codes, plan_legend, shown_options, text_plan_legend
from ndcp.specs.recompute import RecomputePlan, StageRecompute

PLAN = RecomputePlan("per-stage", (StageRecompute(none=2, **{"layernorm+mla_up_proj": 3}),
                                   StageRecompute(full=1, offload=4)))


def test_the_legend_names_each_code_the_plans_write():
    assert shown_options([PLAN]) == ["none", "selective", "layernorm+mla_up_proj", "offload", "full"]
    assert PLAN.summary() == "per-stage 2n/0s/3ln+mla/4o/1f"
    codes = plan_codes(shown_options([PLAN]))
    assert codes.startswith("n none, s selective, ln layernorm, mla mla_up_proj, o offload, f full")
    assert "+ joins the Megatron recompute modules" in codes  # a combined option is written with +
    assert "+ joins" not in plan_codes(["none", "selective", "full"])


def test_core_attn_in_a_module_combination_reads_as_selective_whose_code_it_shares():
    """core_attn is Megatron's selective (Korthikanti's attention core): its code `s` keeps selective's name in the
    legend whether or not the plans run selective itself (the Nemotron-3 Nano recipe's core_attn+layernorm+moe)."""
    assert plan_codes(["none", "selective", "core_attn+layernorm+moe", "full"]).startswith(
        "n none, s selective, ln layernorm, moe, f full")
    assert "s selective" in plan_codes(["none", "core_attn+layernorm+moe"])


def test_uniform_plans_need_no_legend():
    assert plan_legend([RecomputePlan.uniform("selective")]) is None
    assert plan_legend([RecomputePlan.uniform("full"), PLAN]).plain.startswith("recompute plans: layers per option")


def test_a_plan_known_only_by_its_text_gets_the_same_legend():
    label = "tp8 pp16 dp64 mbs1 z1 sp " + PLAN.summary().removeprefix("per-stage ")
    assert text_plan_legend([label, "tp1 pp1 dp8 none"]).plain == plan_legend([PLAN]).plain
    assert text_plan_legend(["tp1 pp1 dp8 mbs2 z1 layernorm+mla_up_proj", "a/b"]) is None


def test_breaks_fall_between_words_and_after_a_slash_only():
    text = "#1 3n/0s/18ln+mla/23ln+mla+act/6f"
    offsets = break_offsets(text, 16, indent=3)
    pieces = [text[a:b] for a, b in zip([0, *offsets], [*offsets, len(text)])]
    assert pieces == ["#1 3n/0s/", "18ln+mla/", "23ln+mla+act/", "6f"]
    assert break_offsets(text, 80) == []
    assert break_offsets("averyveryverylongpiece/x", 5) == [23]  # a piece wider than the line stays whole


def test_breakable_text_keeps_every_piece_whole_and_indents_what_follows():
    console = Console(width=20, record=True, color_system=None)
    console.print(Breakable(Text("#10 3n/0s/18ln+mla/23ln+mla+act/6f"), indent=4))
    lines = console.export_text().splitlines()
    assert [line.rstrip() for line in lines] == ["#10 3n/0s/18ln+mla/", "    23ln+mla+act/6f"]
    assert Console(width=200).measure(Breakable(Text("3n/0s/23ln+mla+act/6f"))).minimum == len("23ln+mla+act/")
