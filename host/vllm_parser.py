"""The host's own vLLM, reached at run time: its server's argument parser (the one `python -m
vllm.entrypoints.openai.api_server` builds) and its serve-args validator, imported from the vLLM of the python
that runs this (`importlib.import_module`: the controller has no vLLM, and no static import shows it), and
the installed release read from its metadata without importing it. The vllm-args-check tool
(host/tools/vllm_args_check.py) judges a launch with them, host/launch_identity.py whether two launches are
the same engine.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

# Where vLLM keeps the server's parser, newest layout first (it moved between releases).
PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
FLEXIBLE_PARSER_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")


def _import_first(names: Sequence[str], attribute: str) -> Any:
    errors = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            errors.append(f"{name}: {error}")
            continue
        if hasattr(module, attribute):
            return getattr(module, attribute)
        errors.append(f"{name} has no {attribute}")
    raise ImportError(f"this vLLM has no {attribute} where vllm-fleet looks for it ({'; '.join(errors)})")


def host_vllm() -> tuple[str, Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], Any] | None]:
    """The installed vLLM's version, a factory of its server parser, and its serve-args validator."""
    vllm = importlib.import_module("vllm")  # the host's; the controller has none
    version = str(getattr(vllm, "__version__", "unknown"))
    make_arg_parser = _import_first(PARSER_MODULES, "make_arg_parser")
    flexible = _import_first(FLEXIBLE_PARSER_MODULES, "FlexibleArgumentParser")
    try:
        validate = _import_first(PARSER_MODULES, "validate_parsed_serve_args")
    except ImportError:
        validate = None

    def make_parser() -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = make_arg_parser(
            flexible(description="vLLM OpenAI-Compatible RESTful API server.")
        )
        return parser

    return version, make_parser, validate


def installed_vllm() -> tuple[str, str] | None:
    """The installed vLLM's version and a digest of its RECORD, from its metadata: no import."""
    try:
        dist = importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None
    record = dist.read_text("RECORD") or ""
    return dist.version, hashlib.sha256(record.encode()).hexdigest()
