"""The whole fleet's components, built in dependency order: hosts and their front doors, access files,
storage, model downloads, services (a rollout group's members after the ones they wait for), reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi

from components.access import build_access
from components.adapters import DeploymentAdapters, DeploymentAdaptersArgs
from components.deploy_report import DeployReport, DeployReportArgs
from components.front_door import FrontDoor, FrontDoorArgs
from components.host import GpuHost, GpuHostArgs
from components.model_download import ModelDownload, ModelDownloadArgs
from components.remote import StepLedger
from components.storage import SharedStorage, SharedStorageArgs
from components.vllm_service import VllmService, VllmServiceArgs
from host.contract import StartForecastRecord
from models.adapters import adapter_download_name
from models.config import ResolvedDeployment, StackConfig
from render.access import AccessInputs


@dataclass(frozen=True)
class FleetArgs:
    stack: str
    config: StackConfig
    deployments: Sequence[ResolvedDeployment]
    private_key: pulumi.Input[str]
    hf_token: pulumi.Output[str] | None
    access: AccessInputs
    # Per deployment, the drift-repair count its activation renders (controller/checks.py).
    repairs: Mapping[str, int]
    # Where the steps of cordoned hosts are declared (controller/cordon.py's CordonedSteps).
    cordoned: StepLedger
    # Per deployment, the drift-repair count of its adapters step (the survey saw other adapters loaded).
    adapter_repairs: Mapping[str, int] = field(default_factory=dict)
    # Per (storage, download name), the drift-repair count of its download step (files missing or changed).
    download_repairs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Per deployment, the forecast of its engine's start its activation carries (controller/forecast.py).
    forecasts: Mapping[str, StartForecastRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class Fleet:
    """What the stack exports, by name."""

    hosts: dict[str, GpuHost]
    storages: dict[str, SharedStorage]
    services: dict[str, VllmService]
    reports: dict[str, DeployReport]
    adapters: dict[str, DeploymentAdapters] = field(default_factory=dict)

    def export(self) -> None:
        """The stack's outputs: what each deployment serves and its report, each storage's use, each host's
        facts (`pulumi stack output`, scripts/status.py and the tests read them by these names)."""
        deployments = {
            name: {
                "endpoint": s.endpoint,
                "servedModelName": s.served_model_name,
                "unitName": s.unit_name,
                "modelPath": s.model_path,
                "launch": s.launch,
                "report": self.reports[name].numbers,
                "status": self.reports[name].status,
            }
            for name, s in self.services.items()
        }
        pulumi.export("deployments", deployments)
        storage = {
            name: {"path": s.path, "bytesUsed": s.bytes_used, "bytesFree": s.bytes_free}
            for name, s in self.storages.items()
        }
        pulumi.export("storage", storage)
        pulumi.export("hosts", {name: h.facts for name, h in self.hosts.items()})


def build_fleet(args: FleetArgs) -> Fleet:
    stack, resolved = args.config, args.deployments
    hosts = {
        h.name: GpuHost(
            h.name, GpuHostArgs(host=h, stack=args.stack, private_key=args.private_key, cordoned=args.cordoned)
        )
        for h in stack.hosts
    }
    front_doors = {name: FrontDoor(f"{name}-front-door", FrontDoorArgs(host=host)) for name, host in hosts.items()}
    access_steps = build_access(args.access, resolved, args.stack, hosts, front_doors)
    storages = {
        s.name: SharedStorage(
            s.name, SharedStorageArgs(storage=s, host=hosts[s.host], kept_dirs=stack.kept_dirs_on(s.name))
        )
        for s in stack.storage
    }
    # Models and adapters alike (an adapter's key is models.adapters.adapter_download_name).
    downloads: dict[tuple[str, str], ModelDownload] = {}
    for store in stack.storage:
        for model_name, spec in stack.downloads_on(store.name).items():
            downloads[(store.name, model_name)] = ModelDownload(
                f"{store.name}-{model_name}",
                ModelDownloadArgs(
                    model_name=model_name,
                    model=spec,
                    storage=storages[store.name],
                    hf_endpoint=stack.hf_endpoint,
                    hf_token=args.hf_token,
                    repairs=args.download_repairs.get((store.name, model_name), 0),
                ),
            )
    services: dict[str, VllmService] = {}
    waits_for = stack.rollout_waits_for()
    for rd in resolved:
        services[rd.deployment.name] = VllmService(
            rd.deployment.name,
            VllmServiceArgs(
                deployment=rd,
                stack=args.stack,
                host=hosts[rd.host.name],
                download=downloads[(rd.storage.name, rd.model_name)],
                front_door=front_doors[rd.host.name],
                hf_token=args.hf_token,
                # Config order puts a group's earlier members first, so the one waited for exists already.
                after=[services[waits_for[rd.deployment.name]]] if rd.deployment.name in waits_for else [],
                nodes=[
                    (hosts[node.name], downloads[(stack.storage_for_host(node.name).name, rd.model_name)])
                    for node in rd.node_hosts[1:]
                ],
                access=access_steps[rd.deployment.name],
                repairs=args.repairs.get(rd.deployment.name, 0),
                forecast=args.forecasts.get(rd.deployment.name),
            ),
        )
    # Adapters load into the engine the swap left serving.
    adapters = {
        rd.deployment.name: DeploymentAdapters(
            f"{rd.deployment.name}-adapters",
            DeploymentAdaptersArgs(
                deployment=rd,
                stack=args.stack,
                host=hosts[rd.host.name],
                service=services[rd.deployment.name],
                downloads=[downloads[(rd.storage.name, adapter_download_name(a.name))] for a in rd.adapters],
                repairs=args.adapter_repairs.get(rd.deployment.name, 0),
            ),
        )
        for rd in resolved
        if rd.serving.lora is not None
    }
    # What each deployment serves after the deploy.
    reports = {
        rd.deployment.name: DeployReport(
            f"{rd.deployment.name}-report",
            DeployReportArgs(
                deployment=rd, stack=args.stack, host=hosts[rd.host.name], service=services[rd.deployment.name]
            ),
        )
        for rd in resolved
    }
    return Fleet(hosts, storages, services, reports, adapters)
