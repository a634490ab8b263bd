"""The loader picked from a host's facts (models/load_choice.py): on the reference server's recorded survey
(its RAM and /shared's filesystem not in it: said unknown, vLLM's defaults kept), on the sandbox's recorded
facts (tests/fixtures/sandbox-host/), and on the facts a server could report; a value the stack sets wins."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from controller.forecast import load_facts, with_load_choice
from host.contract import Memory, Survey
from models.config import LoadStrategy, ResolvedDeployment
from models.load_choice import LoadFacts, pick_loader
from models.loader import load_stack_file, parse_stack_config
from render.launch import load_choice, vllm_arguments
from tests.support.paths import ROOT
from tests.support.reference import as_surveyed, surveys

SANDBOX = Survey.from_dict(
    json.loads((ROOT / "tests" / "fixtures" / "sandbox-host" / "survey.json").read_text())["fleet-4"]
)


def kimi_on_the_reference_server() -> ResolvedDeployment:
    (rd,) = as_surveyed(load_stack_file(ROOT / "Pulumi.prod.yaml")).resolved_deployments()
    return rd


def test_on_the_reference_server_the_unknown_facts_keep_vllms_defaults_and_are_named() -> None:
    rd = kimi_on_the_reference_server()
    assert rd.serving.safetensors_load_strategy is LoadStrategy.PREFETCH  # the Kimi preset's own (catalog.yaml)
    facts = load_facts(rd, surveys()["gpu-01"])
    assert facts == LoadFacts(547.0, None, None, None, (0, 11), "/shared/kimi-k2.5-int4")
    choice = pick_loader(facts, rd.serving.load_format, rd.serving.safetensors_load_strategy)
    assert (choice.load_format, choice.load_strategy) == (None, LoadStrategy.PREFETCH)
    assert choice.describe() == (
        "--load-format auto (vLLM default), --safetensors-load-strategy prefetch: vLLM's default loader: the "
        "host's RAM is unknown, so whether the page cache holds it is too; --safetensors-load-strategy prefetch: "
        "set in the stack"
    )
    # MiniMax, left to auto: vLLM's defaults, the unknown facts named.
    spec = load_stack_file(ROOT / "Pulumi.prod.yaml").models["minimax-m2.5"]
    minimax = rd.model_copy(update={"model": spec, "serving": spec.serving})
    picked, choice = with_load_choice(minimax, surveys()["gpu-01"])
    assert (choice.load_format, choice.load_strategy) == (None, None) and picked.serving == minimax.serving
    assert choice.why == (
        "vLLM's default loader: the host's RAM is unknown, so whether the page cache holds it is too",
        "vLLM's default strategy: the filesystem of /shared/minimax-m2.5 is unknown",
    )
    # The launch the unit renders: no loader flag, as the server's own engine runs (adopted in place): its
    # vLLM 0.11 predates the strategy flag, and the pre-warm reads the files instead.
    args = vllm_arguments(with_load_choice(rd, surveys()["gpu-01"])[0])
    assert "--load-format" not in args and "--safetensors-load-strategy" not in args


def test_on_the_sandbox_a_tiny_model_on_a_local_overlay_keeps_vllms_defaults(dev_raw: dict[str, Any]) -> None:
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    facts = load_facts(rd, SANDBOX)
    assert (facts.filesystem, facts.vllm_release, facts.extras) == (
        "overlay",
        (0, 32),
        {"instanttensor": None, "runai_model_streamer": None},
    )
    assert facts.mem_total_gib == pytest.approx(24105 / 1024)
    choice = load_choice(rd, facts)
    assert (choice.load_format, choice.load_strategy) == (None, None)
    assert "within 90% of the host's 24 GiB RAM, so the page cache holds it" in choice.why[0]
    assert choice.why[1] == "vLLM's default strategy: /shared/tiny-chat-a is on overlay, a local filesystem"


def server(**facts: Any) -> LoadFacts:
    """Kimi's 547 GB on a server that reports `facts` (vLLM 0.32, 1800 GiB free, /shared on NFS unless said)."""
    known: dict[str, Any] = {
        "checkpoint_gb": 547.0,
        "mem_total_gib": 1800.0,
        "filesystem": "nfs4",
        "extras": {"instanttensor": None, "runai_model_streamer": None},
        "vllm_release": (0, 32),
        "model_path": "/shared/kimi-k2.5-int4",
    }
    return LoadFacts(**{**known, **facts})


def auto(facts: LoadFacts) -> tuple[str | None, LoadStrategy | None]:
    choice = pick_loader(facts, "auto", LoadStrategy.AUTO)
    return choice.load_format, choice.load_strategy


def test_a_network_filesystem_vllm_does_not_prefetch_from_gets_prefetch_when_the_page_cache_holds_it() -> None:
    assert auto(server()) == (None, None)  # NFS: vLLM prefetches by itself
    assert auto(server(filesystem="virtiofs")) == (None, LoadStrategy.PREFETCH)
    assert auto(server(filesystem="ext4")) == (None, None)  # a local disk: the pre-warm reads it
    old = pick_loader(server(filesystem="virtiofs", vllm_release=(0, 16)), "auto", LoadStrategy.AUTO)
    assert old.load_strategy is None and "vLLM 0.16 may not have it (0.17 on)" in old.why[1]


def test_a_checkpoint_the_page_cache_cannot_hold_is_read_by_a_loader_that_needs_none() -> None:
    small = {"mem_total_gib": 400.0}
    assert auto(server(**small)) == (None, None)  # no extra installed: the default, and why
    why = pick_loader(server(**small), "auto", LoadStrategy.AUTO).why
    assert why[0] == (
        "vLLM's default loader: 547 GB (509 GiB) over 90% of the host's 400 GiB RAM, and neither instanttensor nor "
        "runai_model_streamer is installed"
    )
    assert why[1] == "lazy: nfs4, but the page cache cannot hold it, and a prefetch would evict itself"
    both = {"instanttensor": "0.1.9", "runai_model_streamer": "0.15.0"}
    assert auto(server(**small, extras=both)) == ("instanttensor", None)
    assert auto(server(**small, extras=both, vllm_release=(0, 17))) == ("runai_streamer", None)
    assert auto(server(**small, extras={"runai_model_streamer": "0.15.0"})) == ("runai_streamer", None)
    unknown = pick_loader(server(**small, extras=None), "auto", LoadStrategy.AUTO)
    assert unknown.load_format is None and "which loaders' extras the host has is unknown" in unknown.why[0]


def test_what_the_stack_sets_wins() -> None:
    choice = pick_loader(
        server(mem_total_gib=400.0, extras={"instanttensor": "0.1.9"}), "safetensors", LoadStrategy.EAGER
    )
    assert (choice.load_format, choice.load_strategy) == ("safetensors", LoadStrategy.EAGER)
    assert choice.why == (
        "--load-format safetensors: set in the stack",
        "--safetensors-load-strategy eager: set in the stack",
    )
    # A strategy the stack sets beside a picked format, and the other way round.
    assert pick_loader(server(filesystem="virtiofs"), "auto", LoadStrategy.LAZY).load_strategy is LoadStrategy.LAZY
    assert pick_loader(server(filesystem="virtiofs"), "runai_streamer", LoadStrategy.AUTO).load_strategy is None


def test_auto_in_the_stack_renders_no_flag_of_its_own(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0]["overrides"] = {"loadFormat": "auto", "safetensorsLoadStrategy": "auto"}
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    args = vllm_arguments(rd)
    assert "--load-format" not in args and "--safetensors-load-strategy" not in args
    picked = rd.model_copy(update={"serving": rd.serving.model_copy(update={"load_format": "runai_streamer"})})
    args = vllm_arguments(picked)
    assert args[args.index("--load-format") + 1] == "runai_streamer"


def test_the_pick_rests_on_facts_that_stay_put_so_an_unchanged_stack_renders_the_same_launch() -> None:
    """MemAvailable moves with the page cache and with what runs (the pre-warm fills it, an engine's load
    drains it): a pick on it would flip between two previews near the 90% line and restart the engine. The
    pick reads MemTotal: a host whose free RAM moves either side of the line renders one launch."""
    (rd,) = load_stack_file(ROOT / "Pulumi.prod.yaml").resolved_deployments()  # the host's vLLM: the survey's
    auto = rd.model_copy(
        update={"serving": rd.serving.model_copy(update={"safetensors_load_strategy": LoadStrategy.AUTO})}
    )
    base = Survey.from_dict(
        {"mounts": [{"path": "/shared", "type": "virtiofs"}], "vllm": {"version": "0.32.0", "extras": {}}}
    )
    launches = set()
    for available in (200, 560, 620, 1000):  # GiB free, either side of 547 GB / 0.9 = 566 GiB
        found = dataclasses.replace(base, memory=Memory(total_mib=1024 * 1024, available_mib=available * 1024))
        launches.add(tuple(vllm_arguments(with_load_choice(auto, found)[0])))
    (launch,) = launches
    assert launch[launch.index("--safetensors-load-strategy") + 1] == "prefetch"
    # A host whose RAM cannot hold it (MemTotal 512 GiB) reads lazily, whatever is free.
    small = dataclasses.replace(base, memory=Memory(total_mib=512 * 1024, available_mib=500 * 1024))
    assert "--safetensors-load-strategy" not in vllm_arguments(with_load_choice(auto, small)[0])


def test_the_rendezvous_port_follows_the_loader_the_stack_states_not_the_pick(dev_raw: dict[str, Any]) -> None:
    """`auto` hashes as unset did before it existed, and the pick from the host's facts does not move the port:
    a host whose RAM, mounts or extras change, or this program's upgrade that picks for a deployment that
    left the loader unset, would otherwise move every multi-node unit's port (a restart of all its nodes) for
    a setting that does not change what its nodes rendezvous on. A value the stack sets is part of it."""
    (unset,) = parse_stack_config(dev_raw).resolved_deployments()
    dev_raw["deployments"][0]["overrides"] = {"loadFormat": "auto", "safetensorsLoadStrategy": "auto"}
    (auto,) = parse_stack_config(dev_raw).resolved_deployments()
    assert auto.master_port == unset.master_port
    picked, _ = with_load_choice(auto, SANDBOX)
    assert picked.master_port == unset.master_port and vllm_arguments(picked) == vllm_arguments(unset)
    # A host whose facts pick other loaders: another launch, the same port.
    roomy = Survey.from_dict(
        {
            "memory": {"totalMib": 1024 * 1024, "availableMib": 900 * 1024},
            "mounts": [{"path": "/", "type": "virtiofs"}],
            "vllm": {"version": "0.32.0", "extras": {}},
        }
    )
    prefetching, choice = with_load_choice(auto, roomy)
    assert choice.load_strategy is LoadStrategy.PREFETCH, choice
    assert "--safetensors-load-strategy" in vllm_arguments(prefetching)
    assert prefetching.master_port == unset.master_port
    dev_raw["deployments"][0]["overrides"] = {"safetensorsLoadStrategy": "prefetch"}
    (prefetch,) = parse_stack_config(dev_raw).resolved_deployments()
    assert prefetch.master_port != unset.master_port
    assert with_load_choice(prefetch, SANDBOX)[0].master_port == prefetch.master_port
