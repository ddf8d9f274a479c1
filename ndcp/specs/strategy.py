"""One parallel strategy: degrees, batch split, sharding, schedule, layer partition and recompute plan."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import gcd

from .fields import SpecError, non_negative_int, positive_int, require
from .recompute import RECOMPUTE_MODES, RecomputePlan, StageRecompute


@lru_cache(maxsize=4096)
def accounted_partition(layers: int, virtual_stages: int) -> tuple[int, ...] | None:
    """Megatron's split counting the embedding and the loss as one layer each (--account-for-embedding-in-pipeline-
    split, --account-for-loss-in-pipeline-split; core transformer_block.py get_num_layers_to_build): layers + 2 split
    evenly, the first virtual stage one fewer (embedding), the last one fewer (loss); docs/formulas.md §4. None when
    the layers already split evenly, layers + 2 does not, or a first/last stage would hold no layer."""
    per, rest = divmod(layers + 2, virtual_stages)
    if layers % virtual_stages == 0 or rest or per < 2:
        return None
    return (per - 1,) + (per,) * (virtual_stages - 2) + (per - 1,)


def default_partition(layers: int, virtual_stages: int) -> tuple[int, ...]:
    """Layers per virtual stage: even where possible, else Megatron's embedding+loss accounted split where layers + 2
    divides (accounted_partition); otherwise the remainder goes to interior stages first, so the first and last
    stages (which also hold the embedding, the output layer and the logits) get fewer. Never fails while
    layers >= virtual_stages (DeepSeek-V3's 61 layers on 16 stages: 3, 4 x 13, 3... see tests)."""
    accounted = accounted_partition(layers, virtual_stages)
    if accounted is not None:
        return accounted
    base, extra = divmod(layers, virtual_stages)
    counts = [base] * virtual_stages
    order = list(range(1, virtual_stages - 1)) + [virtual_stages - 1, 0] if virtual_stages > 2 else [1, 0][:virtual_stages]
    for v in order[:extra]:
        counts[v] += 1
    return tuple(counts)


# Megatron-Core --cp-comm-type (Transformer Engine context parallelism): p2p ring of K/V chunks, all-gather of K/V,
# Ulysses-style all-to-all of Q/K/V/output, hierarchical a2a inside a scale-up domain + p2p across (docs/formulas.md
# §7).
CP_COMM_TYPES = ("p2p", "allgather", "a2a", "a2a+p2p")


def cp_a2a_size(domain_ranks: int, tp: int, cp: int) -> int:
    """a2a+p2p's inner all-to-all group: the CP ranks that share a scale-up domain of `domain_ranks` consecutive
    ranks (ranks ordered TP -> CP; ClusterSpec.domain_ranks), which divides cp."""
    return gcd(cp, max(1, domain_ranks // tp))


@dataclass(frozen=True)
class Strategy:
    """Degrees multiply as dp*tp*pp*cp = devices; dp*mbs*mbn = global batch. ep/etp split the experts."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: int = 1
    mbs: int = 1
    mbn: int = 1
    zero: int = 1  # 0 none, 1 optimizer states (Megatron distributed optimizer), 2 + gradients, 3 + parameters
    sp: bool = False
    schedule: str = "1f1b"
    recompute: RecomputePlan = field(default_factory=RecomputePlan)
    layers_per_stage: tuple[int, ...] = ()  # per virtual stage, in model order; () = the default partition
    cp_comm: str = "p2p"  # context-parallel attention communication (Megatron --cp-comm-type), see CP_COMM_TYPES
    # optimizer states (master weights, moments) in host memory, the optimizer step on the host (Megatron
    # --optimizer-cpu-offload; docs/formulas.md §6.1)
    optimizer_offload: bool = False
    # HSDP (torchtitan dp_shard x dp_replicate, FSDP2 on a 2-D device mesh; docs/formulas.md §7.3): ZeRO-3 shards over
    # the dp_shard x cp ranks of a replica and replicates over dp / dp_shard replicas; 0 (the default, and what
    # dp_shard = dp is stored as): shard over all the data-parallel ranks (plain FSDP / ZeRO)
    dp_shard: int = 0

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn"):
            positive_int(name, getattr(self, name))
        require(self.zero in (0, 1, 2, 3), "zero", self.zero, "valid: 0, 1, 2, 3")
        # Relations between fields (sp needs tp > 1, which schedules exist and run vpp chunks, ...) are rules of
        # ndcp.rules, checked where a strategy enters (estimate, strategy files, validate); here only each field.
        require(isinstance(self.schedule, str) and bool(self.schedule), "schedule", self.schedule,
                "a schedule name")
        require(self.cp_comm in CP_COMM_TYPES, "cp_comm", self.cp_comm, "valid: " + ", ".join(CP_COMM_TYPES))
        require(isinstance(self.optimizer_offload, bool), "optimizer_offload", self.optimizer_offload, "true or false")
        non_negative_int("dp_shard", self.dp_shard)
        if self.dp_shard == self.dp:  # one spelling of plain FSDP, so equal strategies compare and hash equal
            object.__setattr__(self, "dp_shard", 0)
        for i, n in enumerate(self.layers_per_stage):
            non_negative_int(f"layers_per_stage[{i}]", n)  # a chunk may hold only the embedding or the loss
        if self.layers_per_stage:
            require(len(self.layers_per_stage) == self.pp * self.vpp, "layers_per_stage", list(self.layers_per_stage),
                    f"expected pp*vpp = {self.pp * self.vpp} entries")
        if not self.recompute.is_uniform:
            require(len(self.recompute.stages) == self.pp * self.vpp, "recompute.stages", len(self.recompute.stages),
                    f"expected one entry per virtual stage (pp*vpp = {self.pp * self.vpp})")

    @classmethod
    def trusted(cls, **fields) -> "Strategy":
        """Build without re-validating: for strategies generated from an already validated search space, where the
        oracle and the solver create hundreds of thousands of them. Every field must be given."""
        strategy = object.__new__(cls)
        strategy.__dict__.update(fields)  # frozen: bypass the dataclass __setattr__ as object.__setattr__ would
        return strategy

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_ranks(self) -> int:
        """Data-parallel ranks ZeRO shards the dense parameters' states over: dp_shard (HSDP) or all dp ranks."""
        return self.dp_shard or self.dp

    @property
    def dp_replicate(self) -> int:
        """HSDP replicas (torchtitan data_parallel_replicate_degree under FSDP2): dp / dp_shard; 1 without HSDP."""
        return self.dp // self.shard_ranks

    @property
    def global_batch(self) -> int:
        return self.dp * self.mbs * self.mbn

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.vpp

    def with_(self, **changes) -> "Strategy":
        """A copy with some fields changed, validated again."""
        return replace(self, **changes)

    def with_zero(self, zero: int) -> "Strategy":
        """The same strategy under another ZeRO stage (0-3); no other field depends on it, so it stays valid."""
        if zero not in (0, 1, 2, 3):
            raise SpecError(f"zero={zero!r} is not valid; valid: 0, 1, 2, 3")
        return Strategy.trusted(**{**self.__dict__, "zero": zero})

    def layout_note(self, layers: int) -> str | None:
        """"embedding+loss accounted" when the default partition of these layers is Megatron's accounted split."""
        if self.layers_per_stage or accounted_partition(layers, self.virtual_stages) is None:
            return None
        return "embedding+loss accounted"

    def as_dict(self) -> dict:
        """The JSON `strategy` object (the recompute plan as a mode string or per-stage counts)."""
        recompute = self.recompute.as_json()
        out = {k: getattr(self, k) for k in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn", "zero", "sp")}
        out.update(recompute=recompute, schedule=self.schedule, cp_comm=self.cp_comm,
                   optimizer_offload=self.optimizer_offload)
        if self.dp_shard:
            out["dp_shard"] = self.dp_shard
        if self.layers_per_stage:
            out["layers_per_stage"] = list(self.layers_per_stage)
        return out

    def key(self) -> tuple:
        """A hashable identity used to deduplicate and order strategies deterministically."""
        return (self.tp, self.pp, self.cp, self.ep, self.etp, self.vpp, self.dp, self.mbs, self.mbn, self.zero,
                self.sp, self.schedule, self.recompute.key(), self.layers_per_stage, self.cp_comm,
                self.optimizer_offload, self.dp_shard)


__all__ = ["accounted_partition", "default_partition", "Strategy", "CP_COMM_TYPES", "cp_a2a_size",
           "RecomputePlan", "StageRecompute", "RECOMPUTE_MODES", "SpecError"]
