"""`ndcp models` and `ndcp devices`: the model library and the device presets."""
from __future__ import annotations

import argparse

from ..report.jsonout import device_document, model_document
from ..report.listings import print_devices, print_models
from ..specs.device import PRESETS, device_preset
from ..specs.device_file import device_yaml
from ..specs.library import list_models
from .common import EXIT_OK, add_quiet_argument, console, subparser
from .outputs import add_json_argument, emit_json


def register_models(subparsers) -> None:
    parser = subparser(subparsers, "models", "list the library models",
                       "List the models shipped with ndcp: parameters, shape, experts and source. "
                       "Any of these names can be passed as MODEL; so can a YAML spec or a Hugging Face config.json.",
                       "ndcp models\nndcp models --json -")
    add_json_argument(parser)
    add_quiet_argument(parser)
    parser.set_defaults(func=run_models)


def run_models(args: argparse.Namespace) -> int:
    models = list_models()
    if emit_json(args, [model_document(m) for m in models]):
        return EXIT_OK
    if args.quiet:
        print("\n".join(m.name for m in models))
    else:
        print_models(console(), models)
    return EXIT_OK


def register_devices(subparsers) -> None:
    parser = subparser(subparsers, "devices", "list the device presets",
                       "List the accelerator presets: memory, peak dense BF16 TFLOP/s, HBM bandwidth, per-device "
                       "intra/inter-node bandwidth (one way), devices per node and the source of each figure. "
                       "--show NAME prints a preset as a device YAML file: edit it and pass its path to --device.",
                       "ndcp devices\nndcp devices --json -\nndcp devices --show h100 > my-h100.yaml")
    add_json_argument(parser)
    add_quiet_argument(parser)
    parser.add_argument("--show", metavar="NAME", help="print this preset as a device YAML file to start from")
    parser.set_defaults(func=run_devices)


def run_devices(args: argparse.Namespace) -> int:
    if args.show is not None:
        device = device_preset(args.show)
        print(device_yaml(device, f"preset {device.name}; units in the comments"), end="")
        return EXIT_OK
    devices = list(PRESETS.values())
    if emit_json(args, [device_document(d) for d in devices]):
        return EXIT_OK
    if args.quiet:
        print("\n".join(d.name for d in devices))
    else:
        print_devices(console(), devices)
    return EXIT_OK


__all__ = ["register_models", "run_models", "register_devices", "run_devices"]
