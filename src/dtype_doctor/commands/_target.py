"""What check and audit point at: `PATH_OR_MODULE:FACTORY` or `--hf-config`, shared argument set-up."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import DoctorError


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        metavar="PATH_OR_MODULE:FACTORY",
        help="a file or module and the name of a factory (or model object) in it, e.g. model.py:build",
    )
    parser.add_argument(
        "--hf-config",
        metavar="CONFIG",
        help="a transformers or diffusers config.json (or its folder): the model is built from it, no weights",
    )
    parser.add_argument(
        "--dtype", metavar="DTYPE", help="precision to put the model in first (float16, bfloat16, ...)"
    )
    parser.add_argument(
        "--keep-fp32",
        action="append",
        default=[],
        metavar="PATTERN",
        help="modules kept in float32 with --dtype (class-name word like 'norm', or a name regex); repeatable",
    )
    parser.add_argument(
        "--autocast", metavar="DTYPE", help="the dtype of the autocast the model will run under"
    )


def load_target(args: argparse.Namespace) -> Any:
    """A factory (or object) for the model; nothing is built yet."""
    from ..loading import hf_config_factory, load_object

    if bool(args.target) == bool(args.hf_config):
        raise DoctorError("give either PATH_OR_MODULE:FACTORY or --hf-config CONFIG")
    if args.hf_config:
        return hf_config_factory(args.hf_config)
    return load_object(args.target)


def dtype_option(value: str | None) -> str | None:
    from ..dtypes import parse_dtype

    return parse_dtype(value) if value else None


def refuse_lazy(model: Any) -> None:
    """Lazy modules (LazyLinear, ...) have no dtype to look at until their first forward."""
    from torch import nn
    from torch.nn.parameter import is_lazy

    models = [model] if isinstance(model, nn.Module) else []
    for root in models:
        for name, module in root.named_modules():
            if any(is_lazy(p) for p in module.parameters(recurse=False)):
                raise DoctorError(
                    f"'{name or '<root>'}' ({type(module).__name__}) has uninitialized lazy parameters: "
                    "run one forward on a dummy batch in the factory first"
                )
