"""`ndcp models` and `ndcp devices`: the model library and the device presets."""
from __future__ import annotations

import argparse

from ..report.jsonout import device_document, model_document
from ..report.listings import print_devices, print_models
from ..specs.device import PRESETS
from ..specs.library import list_models
from .common import EXIT_OK, console, subparser
from .outputs import add_json_argument, emit_json


def register_models(subparsers) -> None:
    parser = subparser(subparsers, "models", "list the library models",
                       "List the models shipped with ndcp: parameters, shape, experts and source.\n"
                       "Any of these names can be passed as MODEL; so can a YAML spec or a Hugging Face config.json.",
                       "ndcp models\nndcp models --json -")
    add_json_argument(parser)
    parser.set_defaults(func=run_models)


def run_models(args: argparse.Namespace) -> int:
    models = list_models()
    if not emit_json(args, [model_document(m) for m in models]):
        print_models(console(), models)
    return EXIT_OK


def register_devices(subparsers) -> None:
    parser = subparser(subparsers, "devices", "list the device presets",
                       "List the accelerator presets: memory, peak dense BF16 TFLOP/s, HBM bandwidth, per-device\n"
                       "intra/inter-node bandwidth (one way), devices per node and the source of each figure.",
                       "ndcp devices\nndcp devices --json -")
    add_json_argument(parser)
    parser.set_defaults(func=run_devices)


def run_devices(args: argparse.Namespace) -> int:
    devices = list(PRESETS.values())
    if not emit_json(args, [device_document(d) for d in devices]):
        print_devices(console(), devices)
    return EXIT_OK


__all__ = ["register_models", "run_models", "register_devices", "run_devices"]
