"""The rulebook: every validity rule a strategy must satisfy, written once.

The space walk (space.py) applies each rule at the loop level where the degrees it reads are known and counts
refusals under the rule's name; `check` applies all of them to one strategy (`ndcp estimate`, `ndcp validate`,
strategy files) and names the first broken rule's field, value and what would be valid. So search and estimate agree
by construction (tests/test_rules.py checks it on random strategies). A schedule's own rules (interleaving's layer
and micro-batch divisibility) live in its module under ndcp/schedules and are applied through the `schedule` rule.

Search restrictions are not validity rules: --fix/--max bounds, tp x cp within a scale-up domain, the vpp range searched
(space.py, SpaceOptions) narrow what is searched; a strategy outside them is still valid for `estimate`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .mixer_rules import cp_mixers, recompute_mixers_refusal, tp_mixers, trainer_mixers
from .schedules import SCHEDULES, Refusal, default_schedule
from .specs.device import ClusterSpec
from .specs.fields import SpecError, divisors
from .specs.model import ModelSpec
from .specs.run import TRAINERS, RunSpec
from .specs.recompute import MODULES, RECOMPUTE_MODES, modules_without_layers, recompute_option
from .specs.strategy import Strategy, cp_a2a_size, default_partition
from .trainers import trainer_named


@dataclass(frozen=True)
class Problem:
    """What the rules read besides the strategy."""

    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec


@dataclass(frozen=True)
class Rule:
    """One named rule: the walk level where it applies (the last of the degrees it reads to be chosen) and a
    function of the problem and the degrees known so far, returning a Refusal when the rule is broken."""

    name: str
    requires: str  # shown in reports
    level: str  # tp | pp | cp | cp_comm | dp | mbs | ep | etp | vpp | strategy (only for a whole strategy)
    broken: Callable[[Problem, dict], Refusal | None]


def _refuse(name: str, field: str, ok: bool, valid: Callable[[], str]) -> Refusal | None:
    return None if ok else Refusal(name, field, valid())


def _tp_heads(p: Problem, d: dict) -> Refusal | None:
    m, tp = p.model, d["tp"]
    return _refuse("tp_heads", "tp", m.heads % tp == 0 and m.num_kv_heads % tp == 0, lambda: (
        f"must divide {m.heads} attention heads and {m.num_kv_heads} KV heads; valid tp: "
        + ", ".join(str(v) for v in divisors(m.heads) if m.num_kv_heads % v == 0)))


def _devices(p: Problem, d: dict) -> Refusal | None:
    n, product = p.cluster.count, d["dp"] * d["tp"] * d["pp"] * d["cp"]
    return _refuse("devices", "dp", product == n, lambda: (
        f"dp*tp*pp*cp = {product} must equal --gpus {n} (tp={d['tp']}, pp={d['pp']}, cp={d['cp']})"))


def _batch_split(p: Problem, d: dict) -> Refusal | None:
    gbs, product = p.run.global_batch, d["dp"] * d["mbs"] * d["mbn"]
    return _refuse("batch_split", "mbn", product == gbs, lambda: (
        f"dp*mbs*mbn = {product} must equal the global batch {gbs}"))


def _pp_layers(p: Problem, d: dict) -> Refusal | None:
    return _refuse("pp_layers", "pp", d["pp"] <= p.model.layers, lambda: f"pp must be <= {p.model.layers} layers")


def _bf16_layers_pp(p: Problem, d: dict) -> Refusal | None:
    """Megatron-Core keeps at most layers // pp layers at each end in BF16 (TransformerConfig.__post_init__ @d98e8a6:
    max_bf16_layers_per_pipeline_stage; RunSpec.first_layers_bf16 / last_layers_bf16)."""
    most = max(p.run.bf16_layers)
    return _refuse("bf16_layers_pp", "pp", most <= p.model.layers // d["pp"], lambda: (
        f"BF16 first/last layers ({most}) must be <= layers / pp; valid pp: at most {p.model.layers // max(1, most)}"))


def _cp_sequence(p: Problem, d: dict) -> Refusal | None:
    cp, seq = d["cp"], p.run.seq_len
    return _refuse("cp_sequence", "cp", cp == 1 or seq % (2 * cp) == 0,
                   lambda: f"the sequence ({seq}) must be divisible by 2*cp")


def _cp_comm_cp(p: Problem, d: dict) -> Refusal | None:
    comm = d.get("cp_comm", "p2p")
    return _refuse("cp_comm_cp", "cp_comm", comm == "p2p" or d["cp"] > 1,
                   lambda: f"cp_comm={comm} needs context parallelism (cp > 1); with cp=1 leave it p2p")


def _cp_comm_heads(p: Problem, d: dict) -> Refusal | None:
    """Ulysses all-to-all re-shards each TP rank's heads over its a2a group (Transformer Engine splits Q's and K/V's
    head dimension alike: no KV-head replication), so both head counts / tp must divide by the group."""
    comm, tp, cp = d.get("cp_comm", "p2p"), d["tp"], d["cp"]
    if comm not in ("a2a", "a2a+p2p"):
        return None
    group = cp if comm == "a2a" else cp_a2a_size(p.cluster.domain_ranks, tp, cp)
    m = p.model
    kv_heads = m.heads if m.mla is not None else m.num_kv_heads
    return _refuse("cp_comm_heads", "cp_comm", m.heads % (tp * group) == 0 and kv_heads % (tp * group) == 0,
                   lambda: (f"{comm} splits the {m.heads} attention heads and {kv_heads} KV heads over tp x "
                            f"{group} ranks (tp={tp}); they must divide by {tp * group}; p2p or allgather work"))


def _cp_comm_nodes(p: Problem, d: dict) -> Refusal | None:
    comm, tp, cp = d.get("cp_comm", "p2p"), d["tp"], d["cp"]
    inner = cp_a2a_size(p.cluster.domain_ranks, tp, cp)
    return _refuse("cp_comm_nodes", "cp_comm", comm != "a2a+p2p" or 1 < inner < cp, lambda: (
        f"a2a+p2p puts a2a among the CP ranks of a scale-up domain and p2p across domains; cp={cp} (tp={tp}) has "
        f"{inner} of its ranks in a domain of {p.cluster.domain_ranks} GPUs: use " + ("a2a" if inner == cp else "p2p")))


def _global_batch(p: Problem, d: dict) -> Refusal | None:
    gbs = p.run.global_batch
    return _refuse("global_batch", "dp", gbs % d["dp"] == 0, lambda: f"must divide the global batch {gbs}")


def _mbn_pp(p: Problem, d: dict) -> Refusal | None:
    return _refuse("mbn_pp", "mbn", d["mbn"] >= d["pp"], lambda: f"micro-batches per step must be >= pp = {d['pp']}")


def _moe_dims(p: Problem, d: dict) -> Refusal | None:
    return _refuse("moe_dims", "ep", p.model.moe is not None or (d["ep"] == 1 and d.get("etp", 1) == 1),
                   lambda: "ep and etp must be 1 on a dense model")


def _ep_experts(p: Problem, d: dict) -> Refusal | None:
    moe = p.model.moe
    return _refuse("ep_experts", "ep", moe is None or moe.experts % d["ep"] == 0,
                   lambda: f"must divide {moe.experts} routed experts")


def _ep_ranks(p: Problem, d: dict) -> Refusal | None:
    """MoE parallel folding: the expert grid ETP x EP x EDP re-carves a stage's TP x CP x DP ranks, so etp*ep
    must divide tp*cp*dp (Megatron-Core core_r0.10, parallel_state.initialize_model_parallel; docs/formulas.md §7)."""
    ranks, grid = d["tp"] * d["cp"] * d["dp"], d["ep"] * d["etp"]
    return _refuse("ep_ranks", "ep", ranks % grid == 0, lambda: (
        f"ep*etp = {grid} must divide tp*cp*dp = {ranks} (tp={d['tp']}, cp={d['cp']}, dp={d['dp']})"))


def _etp_tp(p: Problem, d: dict) -> Refusal | None:
    return _refuse("etp_tp", "etp", d["tp"] % d["etp"] == 0, lambda: f"must divide tp = {d['tp']}")


def _schedule(p: Problem, d: dict) -> Refusal | None:
    """The named schedule exists and runs vpp chunks; then the schedule's own rules (ndcp/schedules)."""
    name = d.get("schedule") or default_schedule(d["vpp"])
    if name not in SCHEDULES:
        return Refusal("schedule", "schedule", "valid: " + ", ".join(SCHEDULES))
    schedule = SCHEDULES[name]
    if not schedule.accepts_vpp(d["vpp"]):
        return Refusal("schedule", "vpp", f"schedule {name} does not run vpp={d['vpp']} chunks per stage; "
                                          f"vpp={d['vpp']} runs {default_schedule(d['vpp'])}")
    return schedule.refusal(p.model.layers, d["pp"], d["vpp"], d.get("mbn"), bool(d.get("layers_per_stage")))


def sp_allowed(sp: bool, tp: int) -> bool:
    """Sequence parallelism splits what tensor parallelism replicates: it needs tp > 1."""
    return not sp or tp > 1


def _sp_tp(p: Problem, d: dict) -> Refusal | None:
    return _refuse("sp_tp", "sp", sp_allowed(d["sp"], d["tp"]), lambda: "sequence parallelism needs tp > 1")


def _partition(p: Problem, d: dict) -> Refusal | None:
    """An explicit partition places every layer, and every device stage holds at least one (a chunk may hold none:
    only the embedding or the loss, as Megatron's layout notation allows)."""
    layers, total = p.model.layers, sum(d["layers_per_stage"] or (p.model.layers,))
    if total != layers:
        return Refusal("partition", "layers_per_stage", f"sums to {total}; it must sum to {layers} layers")
    counts, pp = d["layers_per_stage"], d["pp"]
    empty = next((s for s in range(pp) if counts and not sum(counts[s::pp])), None)
    return _refuse("partition", "layers_per_stage", empty is None,
                   lambda: f"leaves device stage {empty} without a layer")


def _recompute_stages(p: Problem, d: dict) -> Refusal | None:
    """A per-stage recompute plan names as many layers per virtual stage as the partition puts there."""
    plan = d["recompute"]
    if plan.is_uniform:
        return None
    layers = d["layers_per_stage"] or default_partition(p.model.layers, d["pp"] * d["vpp"])
    for i, (stage, n) in enumerate(zip(plan.stages, layers)):
        if stage.layers != n:
            return Refusal("recompute_stages", "recompute",
                           f"recompute.stages[{i}] covers {stage.layers} layers but virtual stage {i} holds {n} "
                           f"(partition {list(layers)})")
    return None


def recompute_option_refusal(model: ModelSpec, run: RunSpec, mode: str) -> Refusal | None:
    """A recompute option the model and trainer can run: module options need the layers their modules act on, and
    every option needs a trainer that runs it (ndcp/trainers: Trainer.recompute_options)."""
    option = recompute_option(mode)
    if refusal := recompute_mixers_refusal(model, mode):  # a hybrid model's blocks, scan layers: the closer reason
        return refusal
    idle = modules_without_layers(option, model.moe is None or model.dense_layers > 0, model.moe is not None,
                                  model.mla is not None)
    if idle:
        return Refusal("recompute_modules", "recompute", f"{mode} does not apply to {model.name}: " + ", ".join(
            f"{n} needs {' or '.join(MODULES[n].needs)} layers" + (f": {MODULES[n].why}" if MODULES[n].why else "")
            for n in idle))
    trainer = trainer_named(run.trainer)
    if option.name not in trainer.recompute_options:
        return Refusal("recompute_modules", "recompute", f"{run.trainer} does not run recompute={mode} ({option.source}"
                       f"); {run.trainer} ({trainer.version}) runs {', '.join(trainer.recompute_options)}")
    return None


def _recompute_modules(p: Problem, d: dict) -> Refusal | None:
    plan = d["recompute"]
    used = [plan.mode] if plan.is_uniform else [m for m in RECOMPUTE_MODES if any(s.count(m) for s in plan.stages)]
    return next((r for r in (recompute_option_refusal(p.model, p.run, m) for m in used) if r), None)


def _trainer(p: Problem):
    return trainer_named(p.run.trainer)


def _trainer_etp(p: Problem, d: dict) -> Refusal | None:
    """The trainer runs expert tensor parallelism (ndcp/trainers: torchtitan 0.3 has no degree for it)."""
    return _refuse("trainer_etp", "etp", _trainer(p).expert_tensor_parallel or d["etp"] == 1,
                   lambda: f"{p.run.trainer} has no expert tensor parallelism ({_trainer(p).version}): etp must be 1")


def _trainer_cp_comm(p: Problem, d: dict) -> Refusal | None:
    comm, runs = d.get("cp_comm", "p2p"), _trainer(p).cp_comms
    return _refuse("trainer_cp_comm", "cp_comm", comm in runs,
                   lambda: f"{p.run.trainer} runs context parallelism as {', '.join(runs)}")


def trainer_zero_stages(run: RunSpec) -> tuple[int, ...]:
    """The ZeRO stages the run's trainer runs whatever the degrees (the search's choices): not those it runs only
    with data parallelism alone (Trainer.zero_dp_alone: torchtitan's DDP, so a search under it takes FSDP,
    ZeRO-3, alone)."""
    trainer = trainer_named(run.trainer)
    return tuple(z for z in trainer.zero_stages if z not in trainer.zero_dp_alone)


def _trainer_zero(p: Problem, d: dict) -> Refusal | None:
    zero, trainer = d["zero"], _trainer(p)
    alone = d["tp"] == d["pp"] == d["cp"] == d["ep"] == 1
    ok = zero in trainer_zero_stages(p.run) or (zero in trainer.zero_stages and alone)
    return _refuse("trainer_zero", "zero", ok, lambda: (
        f"{p.run.trainer} runs ZeRO " + ", ".join(f"{z} ({how})" for z, how in zip(trainer.zero_stages,
                                                                                 trainer.zero_how))))


def _trainer_zero_pipeline(p: Problem, d: dict) -> Refusal | None:
    """The trainer runs this ZeRO stage beside pipeline parallelism (Trainer.zero_without_pipeline: Megatron FSDP)."""
    trainer = _trainer(p)
    return _refuse("trainer_zero_pipeline", "zero", d["pp"] == 1 or d["zero"] not in trainer.zero_without_pipeline,
                   lambda: f"{p.run.trainer} runs ZeRO {', '.join(map(str, trainer.zero_without_pipeline))} only "
                           f"without pipeline parallelism (pp=1, not {d['pp']}); with pp > 1 it runs ZeRO "
                           + ", ".join(str(z) for z in trainer.zero_stages if z not in trainer.zero_without_pipeline))


def optimizer_offload_zero(run: RunSpec) -> tuple[int, ...]:
    """The ZeRO stages under which the run's trainer keeps the optimizer on the host (none: it cannot). Beside FP8
    parameter gathers (ZeRO >= 1 under fp8) only under the recipes its Trainer names (Megatron-LM: delayed scaling,
    arguments.py validate_args)."""
    trainer = trainer_named(run.trainer)
    if run.fp8 and run.fp8_recipe not in trainer.optimizer_offload_fp8_recipes:
        return tuple(z for z in trainer.optimizer_offload_zero if z == 0)
    return trainer.optimizer_offload_zero


def _optimizer_offload(p: Problem, d: dict) -> Refusal | None:
    stages = optimizer_offload_zero(p.run)
    return _refuse("optimizer_offload", "zero" if stages else "optimizer_offload",
                   not d.get("optimizer_offload") or d["zero"] in stages, lambda: (
        f"{p.run.trainer} offloads the optimizer (--optimizer-cpu-offload) only with ZeRO "
        f"{', '.join(map(str, stages))}" + (" under this FP8 recipe (with FP8 parameter gathers it needs delayed "
                                             "scaling)" if p.run.fp8 and 1 not in stages else "") if stages else
        f"{p.run.trainer} has no optimizer offload ({_trainer(p).version}); plan with --trainer megatron"))


def _dp_shard(p: Problem, d: dict) -> Refusal | None:
    shard, dp = d.get("dp_shard", 0), d["dp"]
    if not shard:
        return None
    runs = bool(_trainer(p).hsdp)  # Trainer.hsdp: how the trainer runs it, "" when it does not
    return _refuse("dp_shard", "dp_shard", dp % shard == 0 and d["zero"] == 3 and p.model.moe is None and runs,
                   lambda: "HSDP shards ZeRO-3 (zero=3) over dp_shard ranks and replicates over dp / dp_shard; " + (
        hsdp_refusal(p.run.trainer) if not runs else "with routed experts it is not modelled" if p.model.moe else
        f"valid dp_shard: {', '.join(str(v) for v in divisors(dp))}" if dp % shard else "it needs zero=3"))


def hsdp_refusal(trainer: str) -> str:
    """Why a trainer without HSDP (Trainer.hsdp "") gets no HSDP plan, naming those that run it."""
    runs = " or ".join(t for t in TRAINERS if trainer_named(t).hsdp)
    return f"{trainer} does not run it ({trainer_named(trainer).version}); plan with --trainer {runs}"


# In the walk's loop order (TP -> PP -> CP -> CP_COMM -> DP -> MBS -> EP -> ETP -> VPP). Rules the walk's domains
# satisfy by construction (devices, batch_split, ep_experts, etp_tp, moe_dims: dp and mbn are derived, ep and etp range
# over divisors) are checked on whole strategies only; they are listed at the level where they would apply.
RULEBOOK: tuple[Rule, ...] = (
    Rule("tp_heads", "tp divides the attention heads and the KV heads", "tp", _tp_heads),
    Rule("tp_mixers", "tp divides the linear-attention and Mamba-2 heads and groups", "tp", tp_mixers),
    Rule("trainer_mixers", "linear-attention, Mamba-2 and hybrid-block layers under Megatron-Core", "tp",
         trainer_mixers),
    Rule("sp_tp", "sequence parallelism only with tp > 1", "strategy", _sp_tp),
    Rule("pp_layers", "pp <= layers / vpp", "pp", _pp_layers),
    Rule("bf16_layers_pp", "BF16 first/last layers <= layers / pp (Megatron-Core)", "pp", _bf16_layers_pp),
    Rule("cp_sequence", "sequence divisible by 2 x cp (load-balanced ring attention)", "cp", _cp_sequence),
    Rule("cp_mixers", "cp = 1 with linear attention; Mamba-2: heads and groups split over tp x cp", "cp",
         cp_mixers),
    Rule("cp_comm_cp", "a CP communication type other than p2p only with cp > 1", "cp_comm", _cp_comm_cp),
    Rule("cp_comm_heads", "a2a / a2a+p2p: heads and KV heads divisible by tp x the all-to-all group", "cp_comm",
         _cp_comm_heads),
    Rule("cp_comm_nodes", "a2a+p2p: the CP group spans nodes with more than one CP rank in each", "cp_comm",
         _cp_comm_nodes),
    Rule("devices", "dp x tp x pp x cp = GPUs", "strategy", _devices),
    Rule("global_batch", "dp x mbs divides the global batch", "dp", _global_batch),
    Rule("batch_split", "dp x mbs x mbn = global batch", "strategy", _batch_split),
    Rule("mbn_pp", "micro-batches per step >= pp", "mbs", _mbn_pp),
    Rule("moe_dims", "ep = etp = 1 on dense models", "strategy", _moe_dims),
    Rule("ep_experts", "ep divides the routed experts", "strategy", _ep_experts),
    Rule("etp_tp", "etp divides tp", "strategy", _etp_tp),
    Rule("ep_ranks", "ep x etp divides tp x cp x dp (MoE parallel folding)", "etp", _ep_ranks),
    Rule("schedule", "a known schedule that runs vpp chunks per stage, and its own rules", "vpp", _schedule),
    Rule("partition", "layers per stage sum to the model's layers, at least one per device stage", "strategy",
         _partition),
    Rule("trainer_etp", "the trainer runs expert tensor parallelism (torchtitan 0.3: etp = 1)", "etp", _trainer_etp),
    Rule("trainer_cp_comm", "the trainer runs this CP communication type", "cp_comm", _trainer_cp_comm),
    Rule("optimizer_offload", "the trainer offloads the optimizer under this ZeRO stage", "strategy",
         _optimizer_offload),
    Rule("dp_shard", "HSDP: dp_shard divides dp, with ZeRO-3, on dense models", "strategy", _dp_shard),
    Rule("trainer_zero", "the trainer runs this ZeRO stage with these degrees (ndcp/trainers profiles)", "strategy",
         _trainer_zero),
    Rule("trainer_zero_pipeline", "the trainer runs this ZeRO stage beside pipeline parallelism (Megatron FSDP: "
         "pp = 1)", "strategy", _trainer_zero_pipeline),
    Rule("recompute_stages", "a per-stage recompute plan covers each stage's layers", "strategy", _recompute_stages),
    Rule("recompute_modules", "recompute modules act on the model's layers, under a trainer that has them", "strategy",
         _recompute_modules),
)
LEVEL_RULES = {level: tuple(r for r in RULEBOOK if r.level == level)
               for level in ("tp", "pp", "cp", "cp_comm", "dp", "mbs", "ep", "etp", "vpp")}

# Every refusal name a report can show -> what it requires: the rules, each schedule's rules, search restrictions.
RESTRICTIONS = {
    "tp_cp_node": "tp x cp within the bound (default: tp within a scale-up domain)",
    "fixed": "pinned by --fix",
    "bounded": "above a --max bound",
}
RULES: dict[str, str] = {r.name: r.requires for r in RULEBOOK}
for _schedule_rules in (s.rules for s in SCHEDULES.values()):
    RULES.update(_schedule_rules)
RULES.update(RESTRICTIONS)


def first_refusal(problem: Problem, level: str, degrees: dict) -> Refusal | None:
    """The first rule of one walk level that the degrees known so far break."""
    for rule in LEVEL_RULES[level]:
        refusal = rule.broken(problem, degrees)
        if refusal is not None:
            return refusal
    return None


def strategy_degrees(strategy: Strategy) -> dict:
    """What the rules read of a whole strategy."""
    s = strategy
    return {"tp": s.tp, "pp": s.pp, "cp": s.cp, "dp": s.dp, "ep": s.ep, "etp": s.etp, "vpp": s.vpp, "mbs": s.mbs,
            "mbn": s.mbn, "sp": s.sp, "schedule": s.schedule, "layers_per_stage": s.layers_per_stage,
            "recompute": s.recompute, "cp_comm": s.cp_comm, "zero": s.zero, "optimizer_offload": s.optimizer_offload,
            "dp_shard": s.dp_shard}


def strategy_refusal(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> Refusal | None:
    """The first rule of the rulebook the strategy breaks, or None."""
    problem, degrees = Problem(model, cluster, run), strategy_degrees(strategy)
    for rule in RULEBOOK:
        refusal = rule.broken(problem, degrees)
        if refusal is not None:
            return refusal
    return None


def refusal_error(refusal: Refusal, degrees: dict) -> SpecError:
    """The user error of a broken rule: the field, its value, and what would be valid."""
    value = degrees[refusal.field]
    shown = (list(value) if isinstance(value, tuple) else "on" if value is True
             else value.mode if refusal.field == "recompute" else value)
    return SpecError(f"{refusal.field}={shown} is not valid: {refusal.message}")


def check_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> None:
    """Raise a SpecError naming the first rule the strategy breaks: its field, value, and what would be valid."""
    refusal = strategy_refusal(model, cluster, run, strategy)
    if refusal is not None:
        raise refusal_error(refusal, strategy_degrees(strategy))


def check_positions(model: ModelSpec, run: RunSpec) -> None:
    """Learned position embeddings end at max_positions: a longer sequence has no embedding to look up. RoPE has
    no table, so a RoPE model may train past its max_positions (context extension, as Llama 3.1 did from 8K to 128K;
    docs/models.md §4)."""
    if model.position_embedding == "learned" and run.seq_len > model.max_positions:
        raise SpecError(f"seq_len={run.seq_len} is not valid: {model.name} has {model.max_positions:,} learned "
                        f"positions (max_positions); use --seq-len {model.max_positions} or less")


def check_images(model: ModelSpec, run: RunSpec) -> None:
    """Images need a vision encoder and a size in whole patches, and their tokens must fit in the sequence
    (docs/models.md §5)."""
    encoder, images = model.encoder, run.images_per_sample
    if not images:
        if run.image_size:
            raise SpecError(f"image_size={run.image_size} needs images: add --images-per-sample N")
        return
    if encoder is None:
        raise SpecError(f"images_per_sample={images} is not valid: {model.name} has no vision encoder; drop "
                        "--images-per-sample or give a vision-language model (llava, qwen2_vl, gemma3 config)")
    side = run.image_size or encoder.image_size
    if not side:
        raise SpecError(f"{model.name}'s vision encoder takes any resolution: give --image-size PIXELS "
                        f"(a multiple of {encoder.patch_size * encoder.spatial_merge})")
    encoder.check_image_size(side, "image_size")
    tokens = images * encoder.image_tokens(side)
    if tokens > run.seq_len:
        raise SpecError(f"images_per_sample={images} is not valid: {images} x {encoder.image_tokens(side)} image "
                        f"tokens exceed the sequence ({run.seq_len}); raise --seq-len or lower the images")


def check_given_degrees(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, degrees: dict) -> None:
    """Before dp and mbn are derived from them: the rules of the tp, pp and cp levels (so `tp=3` is told it must
    divide the heads, not that dp cannot take the rest)."""
    problem = Problem(model, cluster, run)
    for level in ("tp", "pp", "cp"):
        refusal = first_refusal(problem, level, degrees)
        if refusal is not None:
            raise refusal_error(refusal, degrees)


__all__ = ["RULEBOOK", "RULES", "Rule", "Problem", "first_refusal", "check_strategy", "strategy_refusal",
           "strategy_degrees", "sp_allowed", "refusal_error", "check_given_degrees", "check_positions",
           "check_images", "trainer_zero_stages", "hsdp_refusal"]
