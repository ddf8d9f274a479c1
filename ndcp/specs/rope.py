"""Rotary position scaling (how a RoPE model reaches contexts beyond its pretraining length): a model fact that the
estimators do not price (it changes no tensor's shape) and the launch configurations state (ndcp/trainers).

- llama3 (Llama-3.1 and later; Hugging Face modeling_rope_utils.py `_compute_llama3_parameters`): frequencies
  with wavelength above original_max_positions / low_freq_factor divided by `factor`, those below
  original_max_positions / high_freq_factor kept, the ones between interpolated.
- yarn (Peng et al. 2023, "YaRN"; DeepSeek-V3's config.json `rope_scaling`): NTK-by-parts interpolation by `factor`
  from original_max_positions, attention scaled by mscale / mscale_all_dim.
"""
from __future__ import annotations

from dataclasses import dataclass

from .fields import finite_number, one_of, positive_int

ROPE_SCALINGS = ("llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """Rotary position scaling, as a Hugging Face config.json `rope_scaling` states it."""

    kind: str
    """llama3 or yarn (the config's rope_type)"""
    factor: float
    """how much longer the scaled context is than original_max_positions"""
    original_max_positions: int
    """the pretraining context the scaling starts from"""
    low_freq_factor: float = 1.0
    """llama3: wavelengths above original_max_positions / low_freq_factor are divided by factor"""
    high_freq_factor: float = 4.0
    """llama3: wavelengths below original_max_positions / high_freq_factor are kept"""
    mscale: float = 1.0
    """yarn: attention scale coefficient"""
    mscale_all_dim: float = 0.0
    """yarn: attention scale coefficient over all dims (0: none)"""

    def __post_init__(self):
        one_of("rope_scaling.kind", self.kind, ROPE_SCALINGS)
        finite_number("rope_scaling.factor", self.factor, 1.0, 1e6)
        positive_int("rope_scaling.original_max_positions", self.original_max_positions)
        for name in ("low_freq_factor", "high_freq_factor", "mscale", "mscale_all_dim"):
            finite_number(f"rope_scaling.{name}", getattr(self, name), 0.0, 1e6)


__all__ = ["RopeScaling", "ROPE_SCALINGS"]
