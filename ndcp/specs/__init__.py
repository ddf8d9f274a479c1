"""Typed, frozen, validated inputs: model, device/cluster, run and strategy. Imports nothing else of ndcp."""
from .device import ClusterSpec, DeviceSpec, PRESETS, device_preset
from .fields import SpecError
from .model import MLASpec, ModelSpec, MoESpec
from .run import RunSpec
from .strategy import RecomputePlan, StageRecompute, Strategy

__all__ = ["ClusterSpec", "DeviceSpec", "PRESETS", "device_preset", "SpecError", "MLASpec", "ModelSpec", "MoESpec",
           "RunSpec", "RecomputePlan", "StageRecompute", "Strategy"]
