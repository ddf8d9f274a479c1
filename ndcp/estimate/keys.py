"""The typed keys the estimators' per-layer and per-stage terms are computed (and cached) by: what each term depends
on of a strategy, named, instead of lists of loose scalars.

- `Degrees`: how one micro-batch of a body layer is split over devices (tp, cp, ep, etp, sp) and its size (mbs);
  with a layer's kind and recompute mode, all its activation memory depends on (estimate/activations.py).
- `LayerKey`: a body layer's kind and recompute mode, its Degrees, and the communication settings its time depends
  on (estimate/layer_time.py).
- `StageKey`: what a stage's work outside the body layers (embedding, output head, MTP modules) depends on besides
  the stage's roles (estimate/time.py); `layer` gives the LayerKey of a body layer run the same way.
- `PlacementKey`: where a strategy's parameters sit, whatever its ZeRO stage (estimate/data_parallel.py).

Named tuples, not frozen dataclasses: the solver's bounds build hundreds of thousands of keys. Measured on this
project's machine (CPython 3.11, six fields): a named tuple is built in 0.26 us and hashes as fast as a plain tuple
of its fields (equal to it, with the same hash); a frozen dataclass takes 0.76 us to build and 1.2 us to build and
hash.
"""
from __future__ import annotations

from typing import NamedTuple

from .overlap import NO_OVERLAP


class Degrees(NamedTuple):
    """How one micro-batch of a body layer is split over devices, and its size."""

    tp: int
    """Tensor-parallel degree: the layer's weights and most activations are split over tp devices."""
    cp: int
    """Context-parallel degree: the micro-batch's sequence is split into cp shards."""
    ep: int
    """Expert-parallel degree: MoE layers' experts are spread over ep devices (1 for a dense layer)."""
    etp: int
    """Expert tensor-parallel degree: each expert's weights are split over etp devices (1 for a dense layer)."""
    mbs: int
    """Micro-batch size, sequences."""
    sp: bool
    """Sequence parallelism: the activations plain TP replicates are split over the tp devices too."""

    @classmethod
    def of(cls, parallel, mbs: int, sp: bool) -> "Degrees":
        """The degrees of `parallel` (anything with tp, cp, ep and etp: a Strategy, the solver's Layout) at
        micro-batch size `mbs` and SP setting `sp`."""
        return cls(parallel.tp, parallel.cp, parallel.ep, parallel.etp, mbs, sp)

    @classmethod
    def of_strategy(cls, strategy) -> "Degrees":
        """A Strategy's degrees, its own micro-batch size and SP setting."""
        s = strategy
        return cls(s.tp, s.cp, s.ep, s.etp, s.mbs, s.sp)

    def without_experts(self) -> "Degrees":
        """The same split with no expert parallelism (ep = etp = 1): what a term that does not depend on the experts'
        placement is cached by, so strategies differing only there share it. Itself when already so."""
        return self if self.ep == self.etp == 1 else self._replace(ep=1, etp=1)

    def tokens(self, seq_len: int) -> float:
        """Local tokens of one micro-batch on one device: mbs sequences of seq_len / cp tokens."""
        return self.mbs * seq_len / self.cp


class LayerKey(NamedTuple):
    """What one body layer's time for one micro-batch depends on of a strategy."""

    kind: str
    """The layer's kind: "dense" or "moe"."""
    mode: str
    """The layer's recompute option (specs/recompute.py)."""
    degrees: Degrees
    """How its micro-batch is split over devices."""
    cp_comm: str = "p2p"
    """How context parallelism exchanges keys and values (communication.CP_COMM_TIME)."""
    hidden: frozenset = NO_OVERLAP
    """The overlaps the strategy runs (estimate/overlap.py hidden_comms); layer_time keys its cache by those inside
    the layer (overlap.layer_overlaps)."""


class StageKey(NamedTuple):
    """What a stage's work outside its body layers (embedding, output head, MTP modules), one micro-batch, depends on
    of a strategy besides the stage's roles (which the schedule gives)."""

    degrees: Degrees
    """How its micro-batch is split over devices."""
    cp_comm: str = "p2p"
    """How context parallelism exchanges keys and values (the MTP modules' layers)."""
    hidden: frozenset = NO_OVERLAP
    """The overlaps the strategy runs (estimate/overlap.py hidden_comms)."""

    def layer(self, kind: str, mode: str) -> LayerKey:
        """The key of a body layer of `kind` under recompute `mode` run with these degrees and settings."""
        return LayerKey(kind, mode, self.degrees, self.cp_comm, self.hidden)


class PlacementKey(NamedTuple):
    """Where a strategy's parameters sit, whatever its ZeRO stage: what its data-parallel groups and each device
    stage's parameters depend on."""

    pp: int
    """Pipeline-parallel degree (device stages)."""
    vpp: int
    """Virtual stages (model chunks) per device stage."""
    layers_per_stage: tuple[int, ...]
    """Body layers per virtual stage, in model order; () for the default partition."""
    tp: int
    """Tensor-parallel degree."""
    cp: int
    """Context-parallel degree."""
    dp: int
    """Data-parallel degree."""
    ep: int
    """Expert-parallel degree."""
    etp: int
    """Expert tensor-parallel degree."""
    schedule: str
    """The pipeline schedule's name ("": the default for vpp); a mirrored schedule holds two stages' worth."""
    dp_shard: int = 0
    """HSDP's shard ranks among the data-parallel ones (Strategy.dp_shard; 0: all of them)."""

    @classmethod
    def of(cls, strategy) -> "PlacementKey":
        """A Strategy's placement."""
        s = strategy
        return cls(s.pp, s.vpp, s.layers_per_stage, s.tp, s.cp, s.dp, s.ep, s.etp, s.schedule, s.dp_shard)


__all__ = ["Degrees", "LayerKey", "StageKey", "PlacementKey"]
