"""The MLP and attention variants of a transformer layer: mixture of experts (MoESpec) and multi-head latent
attention (MLASpec); specs/model.py holds them in a ModelSpec."""
from __future__ import annotations

from dataclasses import dataclass

from .fields import finite_number, non_negative_int, one_of, positive_int, require

MAX_LAYERS = 1 << 14  # 16,384 layers: far above any real model; per-layer loops (partition, plans) stay fast
ROUTER_SCORES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoESpec:
    """Mixture of experts: routed experts (top-k of `experts`), optional always-on shared experts, dense prefix."""

    experts: int
    """routed experts per MoE layer"""
    top_k: int
    """routed experts each token goes to"""
    expert_ffn_hidden: int
    """MLP width of one routed expert"""
    shared_experts: int = 0
    """always-on shared experts per MoE layer (DeepSeek-V3: 1)"""
    shared_expert_ffn_hidden: int = 0
    """MLP width of one shared expert (0 = expert_ffn_hidden)"""
    first_dense_layers: int = 0
    """the first k layers use the dense MLP (DeepSeek-V3: 3)"""
    layer_frequency: int = 1
    """every n-th layer after the dense prefix is MoE (Mixtral, DeepSeek: 1)"""
    capacity_factor: float = 0.0
    """0 = dropless; otherwise tokens per expert are padded or cut to this factor of the even share"""
    # The router: its groups limit where a token's experts are (priced: estimate/moe.py, node-limited dispatch); its
    # scores, bias and scaling are not (the router's GEMM is `hidden x experts` whatever it scores; the launch
    # configurations state them, ndcp/trainers)
    router_score: str = "softmax"
    """how the router scores experts: softmax (Mixtral, Qwen) or sigmoid (DeepSeek-V3 §2.1.2)"""
    router_groups: int = 0
    """group-limited routing (Megatron --moe-router-num-groups; HF n_group): the experts form this many equal groups
    of consecutive experts a token's experts are chosen from (DeepSeek-V3: 8; 0 = no grouping)"""
    router_group_topk: int = 0
    """groups each token may route to (Megatron --moe-router-group-topk; HF topk_group): with the groups laid out
    over the nodes, each token reaches at most this many nodes' groups (DeepSeek-V3: 4 of 8; 0 = no grouping)"""
    router_expert_bias: bool = False
    """a per-expert bias, updated from the load, added to the scores for choosing (DeepSeek-V3's auxiliary-loss-free
    balancing, §2.1.2)"""
    routed_scaling: float = 1.0
    """factor on the routed experts' gate values (DeepSeek-V3 routed_scaling_factor: 2.5)"""

    def __post_init__(self):
        positive_int("moe.experts", self.experts)
        positive_int("moe.top_k", self.top_k)
        require(self.top_k <= self.experts, "moe.top_k", self.top_k, f"must be <= moe.experts ({self.experts})")
        positive_int("moe.expert_ffn_hidden", self.expert_ffn_hidden)
        non_negative_int("moe.shared_experts", self.shared_experts)
        non_negative_int("moe.shared_expert_ffn_hidden", self.shared_expert_ffn_hidden)
        non_negative_int("moe.first_dense_layers", self.first_dense_layers, MAX_LAYERS)
        positive_int("moe.layer_frequency", self.layer_frequency, MAX_LAYERS)
        finite_number("moe.capacity_factor", self.capacity_factor, 0.0, 64.0)
        one_of("moe.router_score", self.router_score, ROUTER_SCORES)
        non_negative_int("moe.router_groups", self.router_groups, self.experts)
        non_negative_int("moe.router_group_topk", self.router_group_topk, self.router_groups)
        require((self.router_groups == 0) == (self.router_group_topk == 0), "moe.router_group_topk",
                self.router_group_topk, "give router_groups and router_group_topk together (or neither)")
        require(self.router_groups == 0 or self.experts % self.router_groups == 0, "moe.router_groups",
                self.router_groups, f"must divide moe.experts ({self.experts})")
        one_of("moe.router_expert_bias", self.router_expert_bias, (False, True))
        finite_number("moe.routed_scaling", self.routed_scaling, 0.0, 1e3, low_open=True)

    @property
    def shared_hidden(self) -> int:
        return self.shared_expert_ffn_hidden or self.expert_ffn_hidden


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and KV projections with decoupled RoPE dims."""

    kv_lora_rank: int
    """rank of the compressed (latent) keys and values"""
    qk_rope_head_dim: int
    """per-head query/key dims that carry the decoupled RoPE"""
    qk_nope_head_dim: int
    """per-head query/key dims without positions"""
    v_head_dim: int
    """per-head value dims"""
    q_lora_rank: int = 0
    """rank of the compressed queries (0 = queries are projected directly, no low-rank Q)"""

    def __post_init__(self):
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            positive_int(f"mla.{name}", getattr(self, name))
        non_negative_int("mla.q_lora_rank", self.q_lora_rank)


__all__ = ["MoESpec", "MLASpec", "MAX_LAYERS", "ROUTER_SCORES"]
