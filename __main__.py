"""vllm-fleet: load and validate the stack config (controller/program.py), check the hosts against it
(controller/checks.py), build hosts, storage, downloads and services (components/), and export what they serve."""

import pulumi

from components.fleet import FleetArgs, build_fleet
from controller import checks, program, sdk
from controller.cordon import CordonedSteps
from render.monitoring import monitoring_output

# What a large fleet's preview needs of the SDK (controller/sdk.py says which changes and why), before
# anything is declared.
sdk.install()

stack = program.load()
stack, repairs = checks.check_hosts(stack)
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
        forecasts=repairs.forecasts,
        cordoned=cordoned,
    )
)
# Every step is declared now: a step of a cordoned host's state that none declares would be deleted there.
cordoned.check_removals(stack.config.hosts)

fleet.export()
# What Prometheus scrapes and the thresholds of its rules (`make monitoring` writes the files from this).
pulumi.export("monitoring", monitoring_output(stack.deployments, stack.name, stack.config.monitoring))
