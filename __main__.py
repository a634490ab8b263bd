"""vllm-fleet: read the stack config and check it and the hosts (controller/), build hosts, storage,
downloads and services (components/), and export what they serve."""

from __future__ import annotations

import gc
import os

# The collector stays off from here until every output is awaited (controller/sdk.pause_cyclic_gc says
# why): the imports below alone ran it about 40 times, a full pass of some 70 ms among them, over modules,
# classes and schemas that all live to the program's end.
gc.disable()
# pydantic reads every installed distribution's entry points for plugins when it builds its first validator
# (~3 ms of a run that validates the config: controller/validated_config.py); these models use none. A value
# the user set stands.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import pulumi  # noqa: E402

from controller import code_cache, probe, sdk  # noqa: E402

# First: the engine starts the command provider while Python imports and checks what follows.
sdk.start_command_provider()
# Then, before the imports that make data classes (the config models too): their generated code, compiled once.
code_cache.install()
# And the hosts' SSH probes, from the raw config, while those imports run (controller/probe.py).
early_probes = probe.start_early(lambda: pulumi.Config("vllm-fleet").get_object("hosts"), os.environ)

from components.fleet import FleetArgs, build_fleet  # noqa: E402
from controller import checks, program  # noqa: E402
from controller.cordon import CordonedSteps  # noqa: E402
from render.monitoring import monitoring_output  # noqa: E402

stack = program.load()
stack, repairs = checks.check_hosts(stack, early_probes)
cordoned = CordonedSteps()
fleet = build_fleet(
    FleetArgs(
        stack=stack.name,
        config=stack.config,
        deployments=stack.deployments,
        private_key=stack.private_key,
        hf_token=stack.hf_token,
        access=stack.access,
        repairs=repairs.activations,
        adapter_repairs=repairs.adapters,
        download_repairs=repairs.downloads,
        cordoned=cordoned,
    )
)
# Every step is declared now: a step of a cordoned host's state that none declares would be deleted there.
cordoned.check_removals(stack.config.hosts)

fleet.export()
# What Prometheus scrapes and the thresholds of its rules (`make monitoring` writes the files from this).
pulumi.export("monitoring", monitoring_output(stack.deployments, stack.name, stack.config.monitoring))
