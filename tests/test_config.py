"""Every validation rule of the stack config, with a good and a bad case, on the real stack files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from models.config import StackTier, start_timeout_for_size
from models.loader import ConfigError, load_catalog, load_stack_file, parse_stack_config
from render.launch import load_strategy_note, vllm_arguments
from render.plan import swap_plan
from tests.support.paths import ROOT
from tests.support.stacks import error_of


def test_real_stack_files_load() -> None:
    prod = load_stack_file(ROOT / "Pulumi.prod.yaml")
    dev = load_stack_file(ROOT / "Pulumi.dev.yaml")
    assert prod.tier is StackTier.PRODUCTION
    assert [h.gpus.count for h in prod.hosts] == [8]
    (primary,) = prod.resolved_deployments()
    assert primary.model_name == "kimi-k2.5-int4"
    assert primary.unit_name == "vllm-kimi-k25-int4.service"
    assert primary.serving.tensor_parallel == 8
    assert prod.wanted_models_on("shared") == ["kimi-k2.5-int4", "minimax-m2.5"]
    assert "kimi-k2.5-nvfp4" not in prod.models
    assert dev.hosts[0].address == "127.0.0.1"
    assert dev.resolved_deployments()[0].model.repo == "acme/tiny-chat-a"


def test_catalog_presets_all_validate(prod_raw: dict[str, Any]) -> None:
    catalog = load_catalog()
    assert {
        "kimi-k2.5-int4",
        "kimi-k2.5-nvfp4",
        "minimax-m2.5",
        "minimax-m2.5-tp8-ep",
        "tiny-chat-a",
        "tiny-chat-b",
    } <= set(catalog)
    prod_raw["models"] = {name: {"preset": name, "revision": "a" * 40} for name in catalog}
    prod_raw["storage"][0]["capacityGb"] = 5000
    config = parse_stack_config(prod_raw)
    assert config.models["minimax-m2.5-tp8-ep"].serving.expert_parallel is True


def test_tp_times_pp_must_equal_gpus(prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0]["gpus"] = [0, 1, 2, 3]
    message = error_of(prod_raw)
    assert "vllm-fleet:deployments[0].gpus" in message
    assert "tensorParallel 8 x pipelineParallel 1 = 8 GPUs" in message
    prod_raw["deployments"][0]["overrides"]["tensorParallel"] = 4
    # 4 GPUs x 96 GiB x 0.95 cannot hold 547 GB of Kimi weights: a different rule now fails.
    assert "KV cache" in error_of(prod_raw)


def test_pipeline_parallel_counts_too(prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0]["overrides"].update({"tensorParallel": 4, "pipelineParallel": 2})
    parse_stack_config(prod_raw)


def test_gpu_index_must_exist_on_host(prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0]["gpus"] = [1, 2, 3, 4, 5, 6, 7, 8]
    message = error_of(prod_raw)
    assert "GPU 8 does not exist on host 'gpu-01', which has 8" in message


def add_second_minimax(raw: dict[str, Any], port: int, unit_name: str | None = "vllm-minimax-m25-b") -> dict[str, Any]:
    """The prod stack with two MiniMax deployments on gpu-01: the first moved to GPUs 0-3, a second one
    added on GPUs 4-7 with `port` (and `unit_name`, when given); returns the second's entry."""
    raw["deployments"][0].update({"model": "minimax-m2.5", "gpus": [0, 1, 2, 3]})
    second: dict[str, Any] = {"name": "second", "host": "gpu-01", "model": "minimax-m2.5", "gpus": [4, 5, 6, 7]}
    second["port"] = port
    if unit_name is not None:
        second["unitName"] = unit_name
    raw["deployments"].append(second)
    return second


def test_deployments_share_no_gpu_and_no_port(prod_raw: dict[str, Any]) -> None:
    second = add_second_minimax(prod_raw, port=8001)
    parse_stack_config(prod_raw)  # disjoint GPUs and ports are fine
    second["gpus"] = [3, 4, 5, 6]
    assert "GPU 3 of host 'gpu-01' is already given to deployment 'primary'" in error_of(prod_raw)
    second["gpus"] = [4, 5, 6, 7]
    second["port"] = 8000
    assert "vllm-fleet:deployments[1].port: port 8000" in error_of(prod_raw)


def test_two_deployments_of_one_model_need_distinct_units(prod_raw: dict[str, Any]) -> None:
    add_second_minimax(prod_raw, port=8001, unit_name=None)
    assert "vllm-fleet:deployments[1].unitName" in error_of(prod_raw)


Edit = Callable[[dict[str, Any]], object]


@pytest.mark.parametrize(
    ("breaks", "said", "repairs"),
    [
        pytest.param(
            lambda raw: raw["deployments"][0]["overrides"].update(gpuMemoryUtilization=0.7),
            # 547 GB = 509 GiB of weights; 8 x 96 x 0.7 = 538 GiB leaves less than 10% for the KV cache.
            ["needs about 509 GiB", "= 538 GiB", "limit 484 GiB"],
            lambda raw: raw["deployments"][0]["overrides"].update(gpuMemoryUtilization=0.9),
            id="a-model-must-fit-gpu-memory-with-kv-headroom",
        ),
        pytest.param(
            lambda raw: raw["storage"][0].update(capacityGb=800),
            [
                "vllm-fleet:storage[0].capacityGb",
                "need 762 GB (kimi-k2.5-int4 547 GB, minimax-m2.5 215 GB)",
                "capacity 800 GB minus margin 100 GB leaves 700 GB",
            ],
            # Not served, not kept: no longer on disk.
            lambda raw: raw["models"]["minimax-m2.5"].update(keep=False),
            id="kept-models-must-fit-storage",
        ),
        pytest.param(
            lambda raw: raw["hosts"][0]["runtime"].update(vllmVersion="0.12.0"),
            [
                "vllm-fleet:deployments[0].overrides.extraArgs: '--disable-log-requests' was removed in vLLM 0.12",
                "host 'gpu-01' runs vLLM 0.12.0 (hosts[].runtime.vllmVersion)",
                "--no-enable-log-requests",
            ],
            # Unpinned: the host's own vLLM judges it in the unit step.
            lambda raw: raw["hosts"][0]["runtime"].pop("vllmVersion"),
            id="a-flag-removed-by-the-hosts-pinned-vllm",
        ),
    ],
)
def test_a_refused_value_names_its_key_and_the_fix_passes(
    prod_raw: dict[str, Any], breaks: Edit, said: list[str], repairs: Edit
) -> None:
    breaks(prod_raw)
    message = error_of(prod_raw)
    for expected in said:
        assert expected in message
    repairs(prod_raw)
    parse_stack_config(prod_raw)


def test_unknown_preset_host_and_model(prod_raw: dict[str, Any]) -> None:
    prod_raw["models"]["kimi-k2.5-int4"]["preset"] = "kimi-k3"
    message = error_of(prod_raw)
    assert "vllm-fleet:models.kimi-k2.5-int4.preset: unknown preset 'kimi-k3'" in message
    prod_raw["models"]["kimi-k2.5-int4"]["preset"] = "kimi-k2.5-int4"
    prod_raw["deployments"][0]["host"] = "gpu-02"
    assert "vllm-fleet:deployments[0].host: unknown host 'gpu-02'" in error_of(prod_raw)
    prod_raw["deployments"][0]["host"] = "gpu-01"
    prod_raw["deployments"][0]["model"] = "glm-5"
    assert "vllm-fleet:deployments[0].model: unknown model 'glm-5'" in error_of(prod_raw)
    prod_raw["deployments"][0]["model"] = "kimi-k2.5-int4"
    prod_raw["storage"][0]["host"] = "gpu-09"
    assert "vllm-fleet:storage[0].host: unknown host 'gpu-09'" in error_of(prod_raw)


def test_production_requires_pinned_revision(prod_raw: dict[str, Any], dev_raw: dict[str, Any]) -> None:
    prod_raw["models"]["minimax-m2.5"]["revision"] = "main"
    message = error_of(prod_raw)
    assert "vllm-fleet:models.minimax-m2.5.revision: 'main' is not a full commit sha" in message
    assert (
        dev_raw["models"]["tiny-chat-a"]["revision"] == "main"
        or len(dev_raw["models"]["tiny-chat-a"]["revision"]) == 40
    )
    parse_stack_config(dev_raw)  # a development stack may follow a branch


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        (("hosts", 0, "name"), "gpu;rm", "vllm-fleet:hosts[0].name"),
        (("hosts", 0, "name"), "../etc", "vllm-fleet:hosts[0].name"),
        (("hosts", 0, "address"), "10.0.0.1; reboot", "vllm-fleet:hosts[0].address"),
        (("hosts", 0, "user"), "root$(id)", "vllm-fleet:hosts[0].user"),
        (("hosts", 0, "runtime", "python"), "/root/ml-env/../bin/python3", "vllm-fleet:hosts[0].runtime.python"),
        (("hosts", 0, "runtime", "python"), "/root/my env/python3", "vllm-fleet:hosts[0].runtime.python"),
        (("storage", 0, "path"), "/shared\nExecStart=/bin/sh", "vllm-fleet:storage[0].path"),
        (("storage", 0, "path"), "shared", "vllm-fleet:storage[0].path"),
        (("deployments", 0, "environment", "NCCL_PROTO"), "LL`id`", "vllm-fleet:deployments[0].environment.NCCL_PROTO"),
        (
            ("deployments", 0, "environment", "NCCL_PROTO"),
            "$(reboot)",
            "vllm-fleet:deployments[0].environment.NCCL_PROTO",
        ),
        (
            ("deployments", 0, "overrides", "extraArgs"),
            ["--x=$(id)"],
            "vllm-fleet:deployments[0].overrides.extraArgs[0]",
        ),
        (
            ("deployments", 0, "overrides", "extraArgs"),
            ["--a\n--b"],
            "vllm-fleet:deployments[0].overrides.extraArgs[0]",
        ),
        (
            ("deployments", 0, "overrides", "extraArgs"),
            ["--port=9000"],
            "vllm-fleet:deployments[0].overrides.extraArgs",
        ),
        (("deployments", 0, "servedModelName"), "kimi; rm -rf /", "vllm-fleet:deployments[0].servedModelName"),
        (("deployments", 0, "name"), "Primary_1", "vllm-fleet:deployments[0].name"),
        (("models", "kimi-k2.5-int4", "repo"), "moonshotai/../x", "vllm-fleet:models.kimi-k2.5-int4.repo"),
        (("models", "kimi-k2.5-int4", "revision"), "main;ls", "vllm-fleet:models.kimi-k2.5-int4.revision"),
    ],
)
def test_unsafe_values_are_rejected_with_their_key(
    prod_raw: dict[str, Any], path: tuple[Any, ...], value: Any, key: str
) -> None:
    node: Any = prod_raw
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    message = error_of(prod_raw)
    assert key in message


def test_unknown_keys_and_plaintext_secrets(prod_raw: dict[str, Any]) -> None:
    prod_raw["hosts"][0]["gpu"] = 8
    assert "vllm-fleet:hosts[0].gpu: unknown key" in error_of(prod_raw)
    del prod_raw["hosts"][0]["gpu"]
    prod_raw["deploy"] = []
    assert "vllm-fleet:deploy: unknown config key" in error_of(prod_raw)
    del prod_raw["deploy"]
    prod_raw["hfToken"] = "hf_plaintext"
    assert "pulumi config set --secret vllm-fleet:hfToken" in error_of(prod_raw)


def test_managed_env_and_flags_point_to_their_field(prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0]["environment"]["CUDA_VISIBLE_DEVICES"] = "0"
    assert "set deployments[].gpus instead" in error_of(prod_raw)


def test_start_timeout_outlasts_the_36_minute_load() -> None:
    kimi = start_timeout_for_size(547)
    assert kimi > 36 * 60
    assert start_timeout_for_size(215) < kimi  # derived from size


def test_config_key_typo_in_a_file(tmp_path: Path) -> None:
    text = (ROOT / "Pulumi.prod.yaml").read_text().replace("memoryGib: 96", "memoryGb: 96")
    broken = tmp_path / "Pulumi.broken.yaml"
    broken.write_text(text)
    with pytest.raises(ConfigError, match=r"vllm-fleet:hosts\[0\]\.gpus\.memoryGb: unknown key"):
        load_stack_file(broken)


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--port=9000", "--port"),
        ("--port 9000", "--port"),
        ("-tp", "--tensor-parallel-size"),
        ("-pp=2", "--pipeline-parallel-size"),
        ("--tensor_parallel_size", "--tensor-parallel-size"),
        ("--served-model", "--served-model-name"),  # an abbreviation argparse would accept
        ("--gpu-memory-utilization=0.5", "--gpu-memory-utilization"),
    ],
)
def test_managed_flags_are_refused_in_every_spelling(prod_raw: dict[str, Any], arg: str, flag: str) -> None:
    prod_raw["deployments"][0]["overrides"]["extraArgs"] = ["--disable-log-requests", arg]
    message = error_of(prod_raw)
    assert "vllm-fleet:deployments[0].overrides.extraArgs" in message
    assert f"sets {flag}, which is rendered from" in message


def test_unmanaged_flags_that_share_a_prefix_pass(prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0]["overrides"]["extraArgs"] = ["--disable-log-requests", "--max-num-seqs", "64"]
    parse_stack_config(prod_raw)


def test_a_flag_is_taken_by_a_pinned_vllm_that_has_not_removed_it_yet(prod_raw: dict[str, Any]) -> None:
    prod_raw["hosts"][0]["runtime"]["vllmVersion"] = "0.11.0"
    parse_stack_config(prod_raw)  # 0.11.0 still takes --disable-log-requests (0.12 refuses it: above)


def test_production_pins_each_hosts_ssh_key(prod_raw: dict[str, Any], dev_raw: dict[str, Any]) -> None:
    assert prod_raw["hosts"][0]["hostKey"].endswith(" placeholder-not-the-servers-key")  # a comment is accepted
    del prod_raw["hosts"][0]["hostKey"]
    message = error_of(prod_raw)
    # The host, and both places its key may come from.
    assert "vllm-fleet:hosts[gpu-01].hostKey: host 'gpu-01' has no SSH host key" in message
    assert "no vllm-fleet:knownHostsFile is set" in message
    assert "ssh-keyscan -t ed25519 -p 22 10.40.0.11" in message
    parse_stack_config(dev_raw)  # the sandbox is development: trusted on first sight
    # With a known_hosts file, the hosts without a key of their own are checked once it is read
    # (controller/known_hosts.py; tests/test_known_hosts.py).
    parse_stack_config({**prod_raw, "knownHostsFile": "known_hosts.prod"})


@pytest.mark.parametrize("path", ["/", "/etc", "/etc/models", "/usr/local/models", "/proc/x", "/home", "/var"])
def test_storage_may_not_be_a_system_directory(prod_raw: dict[str, Any], path: str) -> None:
    prod_raw["storage"][0]["path"] = path
    prod_raw["storage"][0].pop("hfHome", None)
    assert "vllm-fleet:storage[0].path" in error_of(prod_raw)


def test_storage_under_a_data_directory_passes(prod_raw: dict[str, Any]) -> None:
    prod_raw["storage"][0].update(path="/var/lib/models", hfHome="/var/lib/models/huggingface")
    parse_stack_config(prod_raw)


def test_model_directories_are_unique_and_apart_from_hf_home(prod_raw: dict[str, Any]) -> None:
    prod_raw["models"]["minimax-m2.5"]["dir"] = "kimi-k2.5-int4"
    assert "/shared/kimi-k2.5-int4 is also the directory of" in error_of(prod_raw)
    prod_raw["models"]["minimax-m2.5"]["dir"] = "huggingface"
    assert "overlaps the Hugging Face home /shared/huggingface" in error_of(prod_raw)


@pytest.mark.parametrize(
    ("bind", "probe"), [("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("10.40.0.11", "10.40.0.11"), ("fd00::11", "fd00::11")]
)
def test_readiness_probes_the_bind_address(prod_raw: dict[str, Any], bind: str, probe: str) -> None:
    prod_raw["deployments"][0]["bindAddress"] = bind
    (rd,) = parse_stack_config(prod_raw).resolved_deployments()
    assert rd.deployment.readiness_address == probe


def test_bind_address_must_be_an_ip(prod_raw: dict[str, Any]) -> None:
    prod_raw["deployments"][0]["bindAddress"] = "gpu-01.internal"
    assert "vllm-fleet:deployments[0].bindAddress" in error_of(prod_raw)


def test_a_gpu_list_twice_the_engine_allows_blue_green(prod_raw: dict[str, Any]) -> None:
    (kimi,) = parse_stack_config(prod_raw).resolved_deployments()
    assert kimi.gpus_needed == 8 and not kimi.blue_green_possible  # TP8 on the 8-GPU server: stop first
    prod_raw["deployments"][0].update({"model": "minimax-m2.5", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]})
    (minimax,) = parse_stack_config(prod_raw).resolved_deployments()
    assert minimax.gpus_needed == 4 and minimax.blue_green_possible
    prod_raw["deployments"][0]["swapMode"] = "stop-start"
    (forced,) = parse_stack_config(prod_raw).resolved_deployments()
    assert not forced.blue_green_possible


def test_engine_ports_are_claimed_like_the_front_door_port(prod_raw: dict[str, Any]) -> None:
    add_second_minimax(prod_raw, port=18000)  # the first deployment's default engine port (8000 + 10000)
    message = error_of(prod_raw)
    assert "port 18000 of host 'gpu-01' is already used by deployment 'primary' (its port or backendPorts)" in message
    prod_raw["deployments"][1]["port"] = 50000
    assert "the default engine ports port+10000 and port+20000 (60000, 70000) pass 65535" in error_of(prod_raw)
    prod_raw["deployments"][1]["backendPorts"] = [50001, 50002]
    parse_stack_config(prod_raw)
    prod_raw["deployments"][1]["backendPorts"] = [50000, 50002]
    assert "neither the front door's 50000" in error_of(prod_raw)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"enable multithread": True}, "is not an option name"),
        ("num_threads=8", "must be a mapping of `key: value` lines"),
    ],
)
def test_model_loader_extra_config_is_a_json_object_of_option_names(
    prod_raw: dict[str, Any], value: Any, problem: str
) -> None:
    prod_raw["deployments"][0]["overrides"]["modelLoaderExtraConfig"] = value
    assert problem in error_of(prod_raw)


def test_load_fields_render_as_flags_the_hosts_vllm_knows(prod_raw: dict[str, Any], dev_raw: dict[str, Any]) -> None:

    # `auto` picks from the host's facts (tests/test_load_choice.py); unknown here, it passes no flag and has
    # nothing to say.
    prod_raw["hosts"][0]["runtime"]["vllmVersion"] = "0.11.0"
    prod_raw["deployments"][0]["overrides"]["safetensorsLoadStrategy"] = "auto"
    (kimi,) = parse_stack_config(prod_raw).resolved_deployments()
    assert kimi.serving.safetensors_load_strategy == "auto"
    assert "--safetensors-load-strategy" not in vllm_arguments(kimi) and "--load-format" not in vllm_arguments(kimi)
    assert load_strategy_note(kimi) is None
    # The preset's prefetch needs vLLM 0.17; a host on 0.11 (pinned here; the reference server's reading does
    # the same, tests/test_render.py): left out, and the preview says why.
    del prod_raw["deployments"][0]["overrides"]["safetensorsLoadStrategy"]
    (kimi,) = parse_stack_config(prod_raw).resolved_deployments()
    assert kimi.serving.safetensors_load_strategy == "prefetch"
    assert "--safetensors-load-strategy" not in vllm_arguments(kimi)
    note = load_strategy_note(kimi)
    assert note is not None and "needs vLLM 0.17 or later" in note and "runs vLLM 0.11.0" in note
    prod_raw["deployments"][0]["overrides"].update(
        {"safetensorsLoadStrategy": "eager", "modelLoaderExtraConfig": {"enable_multithread_load": True}}
    )
    (eager,) = parse_stack_config(prod_raw).resolved_deployments()
    args = vllm_arguments(eager)
    assert args[args.index("--safetensors-load-strategy") + 1] == "eager" and load_strategy_note(eager) is None
    assert args[args.index("--model-loader-extra-config") + 1] == '{"enable_multithread_load": true}'
    dev_raw["deployments"][0]["overrides"] = {"safetensorsLoadStrategy": "prefetch", "loadFormat": "safetensors"}
    (tiny,) = parse_stack_config(dev_raw).resolved_deployments()
    args = vllm_arguments(tiny)
    assert args[args.index("--safetensors-load-strategy") + 1] == "prefetch"
    assert args[args.index("--load-format") + 1] == "safetensors"


def test_a_staging_path_moves_the_load_and_stays_off_the_storage(prod_raw: dict[str, Any]) -> None:

    prod_raw["hosts"][0]["stagingPath"] = "/local/vllm-staging"
    (rd,) = parse_stack_config(prod_raw).resolved_deployments()
    assert rd.load_path == "/local/vllm-staging/kimi-k2.5-int4" and rd.model_path == "/shared/kimi-k2.5-int4"
    args = vllm_arguments(rd)
    assert args[args.index("--model") + 1] == "/local/vllm-staging/kimi-k2.5-int4"
    assert swap_plan(rd, "prod").load_dir == "/local/vllm-staging/kimi-k2.5-int4"
    prod_raw["hosts"][0]["stagingPath"] = "/shared/staging"
    assert "hosts[0].stagingPath: /shared/staging overlaps the storage path /shared" in error_of(prod_raw)
    prod_raw["hosts"][0]["stagingPath"] = "/var"
    assert "is a system directory" in error_of(prod_raw)


def test_the_share_of_the_model_that_must_be_resident_is_a_share_and_reaches_the_plan(
    dev_raw: dict[str, Any],
) -> None:
    dev_raw["deployments"][0]["prewarmMinResidentShare"] = 1.5
    assert "prewarmMinResidentShare" in error_of(dev_raw)
    dev_raw["deployments"][0]["prewarmMinResidentShare"] = 0.9
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    plan = swap_plan(rd, "dev")
    assert (plan.prewarm_min_resident_share, plan.model) == (0.9, "tiny-chat-a")


def test_a_reference_load_is_a_range_from_low_to_high(prod_raw: dict[str, Any]) -> None:
    prod_raw["models"]["minimax-m2.5"]["referenceLoad"] = {"seconds": 90, "upToSeconds": 60, "where": "a lab box"}
    assert "referenceLoad.upToSeconds 60 is below its seconds 90" in error_of(prod_raw)
    prod_raw["models"]["minimax-m2.5"]["referenceLoad"] = {"seconds": 60, "upToSeconds": 90, "where": "a lab box"}
    assert parse_stack_config(prod_raw).models["minimax-m2.5"].reference_load.typical_seconds == 75  # type: ignore[union-attr]


# ---- fleets: rollout groups, cordons, multi-node deployments ---------------------------------------


def test_rollout_group_has_one_max_unavailable(fleet_raw: dict[str, Any]) -> None:
    assert parse_stack_config(fleet_raw).rollout_waits_for() == {"chat-2": "chat-1"}
    fleet_raw["deployments"][1]["rollout"]["maxUnavailable"] = 2
    assert "deployments[1].rollout.maxUnavailable: 2 differs from 1 of deployments[0] in group 'chat'" in error_of(
        fleet_raw
    )


def across_two(fleet_raw: dict[str, Any]) -> dict[str, Any]:
    """fleet-1 and fleet-2 on a private network, one deployment across both (pipeline parallel 2)."""
    for i, host in enumerate(fleet_raw["hosts"]):
        host["cluster"] = {"address": f"10.77.0.{11 + i}", "interface": "fabric0"}
    fleet_raw["deployments"] = [
        {
            **fleet_raw["deployments"][0],
            "nodes": ["fleet-1", "fleet-2"],
            "gpus": [2],
            "overrides": {"pipelineParallel": 2},
        }
    ]
    fleet_raw["deployments"][0].pop("rollout")
    return fleet_raw


def test_a_deployment_across_two_hosts_resolves_every_node(fleet_raw: dict[str, Any]) -> None:
    config = parse_stack_config(across_two(fleet_raw))
    (rd,) = config.resolved_deployments()
    assert [h.name for h in rd.node_hosts] == ["fleet-1", "fleet-2"] and rd.multi_node
    assert rd.gpus_needed == 1 and not rd.blue_green_possible
    # Each node downloads the model to its own storage, at the same path.
    assert config.wanted_models_on("shared-1") == config.wanted_models_on("shared-2") == ["tiny-chat-a"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["deployments"][0].update(nodes=["fleet-2", "fleet-1"]), "the head first"),
        (
            lambda r: r["deployments"][0].update(nodes=["fleet-1", "fleet-9"]),
            "nodes: unknown host(s) ['fleet-9']; use one of ['fleet-1', 'fleet-2'] from vllm-fleet:hosts",
        ),
        (lambda r: r["hosts"][1].pop("cluster"), "host 'fleet-2' has no hosts[].cluster"),
        (lambda r: r["storage"][1].update(path="/data"), "every node must see the model at the same path"),
        (lambda r: r["deployments"][0].update(gpus=[2, 3]), "= 2 GPUs must equal 2 GPUs per node x 2 nodes"),
        (lambda r: r["deployments"][0].update(gpus=[4]), "GPU 4 does not exist on host 'fleet-2'"),
        (lambda r: r["hosts"][1]["gpus"].update(count=8), "different GPU counts [4, 8]"),
        (lambda r: r["deployments"][0].update(distributedBackend="ray"), "distributedBackend: ray is not built yet"),
        (
            lambda r: r["deployments"].append(
                {**r["deployments"][0], "name": "other", "host": "fleet-2", "nodes": [], "port": 8100, "overrides": {}}
            ),
            "GPU 2 of host 'fleet-2' is already given to deployment",
        ),
    ],
)
def test_multi_node_rules(fleet_raw: dict[str, Any], change: Any, message: str) -> None:
    raw = across_two(fleet_raw)
    change(raw)
    assert message in error_of(raw)


def test_each_model_meets_at_its_own_master_port(fleet_raw: dict[str, Any]) -> None:
    """A node still running the old model must not join a head that rolled back, or the other way round."""
    raw = across_two(fleet_raw)
    (a,) = parse_stack_config(raw).resolved_deployments()
    raw["deployments"][0]["model"] = "tiny-chat-b"
    (b,) = parse_stack_config(raw).resolved_deployments()
    assert a.master_port != b.master_port
    assert all(29500 <= rd.master_port < 29600 for rd in (a, b))


# Slips a new user makes in a stack file, and what the error says: the key, what is wrong, the fix.
@pytest.mark.parametrize(
    ("slip", "said"),
    [
        # Python's name of a key is not the stack file's: refused, with the camelCase spelling offered.
        (
            lambda r: r["deployments"][0].update(bind_address="127.0.0.1"),
            "vllm-fleet:deployments[0].bind_address: unknown key (config keys are camelCase: bindAddress?)",
        ),
        # ... also where the stack file has no camelCase spelling beside it (pydantic's populate_by_name took it).
        (
            lambda r: r["deployments"][0].update(bind_address=r["deployments"][0].pop("bindAddress")),
            "vllm-fleet:deployments[0].bind_address: unknown key (config keys are camelCase: bindAddress?)",
        ),
        # A value without a metacharacter is not told it has one; the pattern comes with its words.
        (
            lambda r: r["deployments"][0].update(name="Chat"),
            "vllm-fleet:deployments[0].name: is not in the form this key takes: lowercase letters, digits",
        ),
        (
            lambda r: r["deployments"][0].update(name="chat;reboot"),
            "vllm-fleet:deployments[0].name: has characters that are refused here (shell metacharacters",
        ),
        # A mapping's own key names itself, not pydantic's `[key]`.
        (
            lambda r: r["deployments"][0].update(environment={"bad-name": "1"}),
            "vllm-fleet:deployments[0].environment.bad-name (the name itself): is not in the form this key takes: "
            "UPPER_CASE letters",
        ),
        (
            lambda r: r["deployments"][0].update(environment={"NCCL_MAX_NCHANNELS": 16}),
            "vllm-fleet:deployments[0].environment.NCCL_MAX_NCHANNELS: Input should be a valid string; quote it in "
            'the YAML ("16")',
        ),
        (lambda r: r["deployments"][0].update(gpus="0,1"), "vllm-fleet:deployments[0].gpus: must be a YAML list"),
        (
            lambda r: r["hosts"].__setitem__(0, "sandbox"),
            "vllm-fleet:hosts[0]: must be a mapping of `key: value` lines",
        ),
        (lambda r: r["storage"][0].pop("capacityGb"), "vllm-fleet:storage[0].capacityGb: is required; add it"),
        (
            lambda r: r["storage"][0].update(capacityGb="20GB"),
            "vllm-fleet:storage[0].capacityGb: must be a number, written without units (got '20GB')",
        ),
        (
            lambda r: r["storage"][0].update(capacityGb=float("inf")),
            "vllm-fleet:storage[0].capacityGb: must be a finite",
        ),
        # YAML's true and false are no numbers (pydantic's lax mode took them for 1 and 0: no drain at all).
        (
            lambda r: r["deployments"][0].update(drainSeconds=False),
            "vllm-fleet:deployments[0].drainSeconds: must be a number, not true or false (got False)",
        ),
        (lambda r: r["deployments"][0].update(gpus=[True]), "vllm-fleet:deployments[0].gpus[0]: must be a number, not"),
        (lambda r: r["hosts"][0]["gpus"].update(count=True), "vllm-fleet:hosts[0].gpus.count: must be a number, not"),
        (
            lambda r: r["models"]["tiny-chat-a"].update(serving={"lora": {"maxLoraRank": True}}),
            "vllm-fleet:models.tiny-chat-a.serving.lora.maxLoraRank: must be a number, not true or false",
        ),
        (lambda r: r.update(hosts=[]), "vllm-fleet:hosts is empty: add 'sandbox' there"),
        # A host with no GPUs: one line that says so, not one per GPU index.
        (
            lambda r: r["hosts"][0]["gpus"].update(count=0),
            "vllm-fleet:deployments[0].gpus: host 'sandbox' has no GPUs (hosts[].gpus.count: 0); a CPU deployment",
        ),
    ],
)
def test_a_slip_in_the_dev_stack_is_named_with_its_key_and_fix(dev_raw: dict[str, Any], slip: Any, said: str) -> None:
    slip(dev_raw)
    message = error_of(dev_raw)
    assert said in message
    assert "does not exist on host" not in message  # the per-index lines of a host with GPUs


@pytest.mark.parametrize(
    ("revision", "said"),
    [
        ("A" * 40, "is a commit sha in uppercase; write it in lowercase"),
        ("abc1234", "is not a full commit sha"),
    ],
)
def test_a_production_revision_that_is_no_full_sha_says_what_it_is(
    prod_raw: dict[str, Any], revision: str, said: str
) -> None:
    prod_raw["models"]["minimax-m2.5"]["revision"] = revision
    assert f"vllm-fleet:models.minimax-m2.5.revision: {revision!r} {said}" in error_of(prod_raw)


def test_a_short_fixed_list_and_ports_past_the_range_say_how_to_fix_them(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0]["backendPorts"] = [18000]
    assert "vllm-fleet:deployments[0].backendPorts[1]: missing: the list takes more entries" in error_of(dev_raw)
    del dev_raw["deployments"][0]["backendPorts"]
    dev_raw["deployments"][0]["port"] = 60000
    assert "or use a port of at most 45535" in error_of(dev_raw)
