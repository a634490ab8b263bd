"""A program of one remote step, made by components.remote exactly as the real components make theirs.

The engine tests run it against the sandbox to prove the rules every step follows (pinned host key,
time limit) without a whole deployment around them. Config (namespace `onestep`): `host` (a host entry
as in vllm-fleet:hosts), `keyFile`, `create` (the script) and `timeoutSeconds`.
"""

from pathlib import Path

import pulumi

from components.remote import connect, remote_step
from controller.cordon import CordonedSteps
from models.hosts import Host

config = pulumi.Config("onestep")
host = Host.model_validate(config.require_object("host"), by_alias=True, by_name=False)
target = connect(host, pulumi.Output.secret(Path(config.require("keyFile")).read_text()), CordonedSteps())


class OneStep(pulumi.ComponentResource):
    def __init__(self, name: str) -> None:
        super().__init__("vllm-fleet:test:OneStep", name, None, None)
        self.step = remote_step(
            f"{name}-step",
            target,
            create=config.require("create"),
            parent=self,
            timeout_seconds=config.require_int("timeoutSeconds"),
        )
        self.register_outputs({"stdout": self.step.stdout})


pulumi.export("stdout", OneStep("probe").step.stdout)
