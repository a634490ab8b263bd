"""Run the real `__main__.py` under Pulumi mocks and record every resource it registers."""

from __future__ import annotations

import json
import os
import runpy
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.remote import RemoteCommand, RemoteCopy
from tests.support.paths import ROOT


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


COMMAND_TYPE = "command:remote:Command"
COPY_TYPE = "command:remote:CopyToRemote"
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value on the wire


def unsecret(value: Any) -> tuple[Any, bool]:
    """(plain value, whether it was marked secret)."""
    if isinstance(value, dict) and SECRET_SIG in value:
        return value["value"], True
    return value, False


def comparable(value: Any) -> Any:
    """An input as the engine compares it: a file asset by its path (the engine adds its digest)."""
    if isinstance(value, pulumi.FileAsset):
        return {"fileAsset": value.path}
    return value


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: dict[str, Registered] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        outputs = dict(args.inputs)
        if args.typ == COMMAND_TYPE:
            outputs["stdout"] = outputs.get("stdout") or ""
            outputs["stderr"] = outputs.get("stderr") or ""
        self.resources[args.name] = Registered(args.typ, args.name, {k: comparable(v) for k, v in args.inputs.items()})
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


def run_program(stack: str, raw_config: dict[str, Any]) -> dict[str, Registered]:
    """Evaluate the program for `stack` with the given `vllm-fleet:` values (namespace stripped)."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="vllm-fleet", stack=stack, preview=False)
    # Encrypted values of the stack file ({"secure": ...}) stand in for the mock secrets below.
    plain = {k: v for k, v in raw_config.items() if not (isinstance(v, dict) and "secure" in v)}
    config = {f"vllm-fleet:{k}": json.dumps(v) if not isinstance(v, str) else v for k, v in plain.items()}
    config.setdefault("vllm-fleet:sshPrivateKey", "-----BEGIN OPENSSH PRIVATE KEY-----\nmock\n")
    config.setdefault("vllm-fleet:hfToken", "hf_mocktoken")
    if not (raw_config.get("access") or {}).get("open"):  # an open stack asks for no key (Pulumi.prod.yaml)
        config.setdefault("vllm-fleet:apiKeys", json.dumps({"mock-client": "mock-api-key-0123456789"}))
    config.pop("vllm-fleet:sshPrivateKeyFile", None)
    pulumi.runtime.set_all_config(
        config, secret_keys=["vllm-fleet:sshPrivateKey", "vllm-fleet:hfToken", "vllm-fleet:apiKeys"]
    )
    # Mocks contact no host and keep no state, on whatever backend the shell names; restored below.
    overrides = {"VLLM_FLEET_OFFLINE": "1", "VLLM_FLEET_SINGLE_OPERATOR": "1"}
    previous = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)

    options: dict[str, pulumi.ResourceOptions] = {}
    # The steps' classes (a command, the host package's copy), their options recorded as they are made.
    classes: list[Any] = [RemoteCommand, RemoteCopy]
    originals = [cls.__init__ for cls in classes]

    def recording(original: Any) -> Any:
        def recording_init(self: Any, resource_name: str, inputs: Any, opts: pulumi.ResourceOptions) -> None:
            options[resource_name] = opts
            original(self, resource_name, inputs, opts)

        return recording_init

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def evaluate() -> None:
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")

    for cls, original in zip(classes, originals, strict=True):
        cls.__init__ = recording(original)
    try:
        evaluate()
    finally:
        for cls, original in zip(classes, originals, strict=True):
            cls.__init__ = original
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    for name, opts in options.items():
        depends_on: Any = opts.depends_on or []
        parent: Any = opts.parent
        mocks.resources[name].options = {
            "depends_on": sorted(d._name for d in depends_on),
            "delete_before_replace": bool(opts.delete_before_replace),
            "additional_secret_outputs": list(opts.additional_secret_outputs or []),
            "parent": parent._name if parent else None,
            "custom_timeouts": opts.custom_timeouts,
            "ignore_changes": list(opts.ignore_changes or []),
        }
    return mocks.resources
