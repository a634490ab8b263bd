"""The CPU side of bench/device/tp8_load.py, which runs on a machine with 8 GPUs: the checkpoint's shards and
each rank's slices (on a checkpoint of a few MB with Kimi's names and shapes, smaller dimensions), its
sizing as it is written, the aggregation of the processes' timings into the record, nvidia-smi's topology
and NVLink outputs, and the record read back by models/downtime.py."""

from __future__ import annotations

import itertools
import json
import os
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from bench.device import checkpoint, gpu_facts, tp8_load
from bench.device import load_rate as base
from models import downtime
from tests.support.paths import ROOT

# Kimi's tensors with dimensions that every TP size up to 8 still splits evenly: a shard is a few KB.
TINY = base.Dims(
    hidden=64, vocab=256, q_lora=32, kv_lora=16, rope=8, heads=8, nope=8, v_head=8, moe_inter=128, experts=4, group=16
)
UUIDS = [f"GPU-0000000{i}-0000-0000-0000-000000000000" for i in range(8)]
DEVICE_FIXTURES = ROOT / "tests" / "fixtures" / "device-records"


def size_of(tensor: base.Tensor) -> int:
    return base.nbytes(tensor[1], tensor[2])


def test_shards_continue_the_layout_and_each_is_as_large_as_asked() -> None:
    planner = checkpoint.ShardPlanner(TINY)
    shards = [planner.next_shard(20_000) for _ in range(checkpoint.SHARDS)]
    names = [t[0] for shard in shards for t in shard]
    layout = base.layout(TINY)
    assert names == [next(layout)[0] for _ in names]  # in checkpoint order, none twice, none skipped
    assert shards[0][0][0] == "model.embed_tokens.weight"
    for shard in shards:
        sizes = [size_of(t) for t in shard]
        assert sum(sizes) >= 20_000 > sum(sizes) - sizes[-1]  # one tensor past the target at most
    # Packed int4 experts (int32, 8 to a word) with bf16 group scales, as compressed-tensors writes them.
    packed = next(t for t in layout if t[0].endswith("experts.0.gate_proj.weight_packed"))
    assert packed[1:] == ("I32", [TINY.moe_inter, TINY.hidden // 8])


def test_one_tensor_larger_than_the_target_makes_a_shard_of_its_own() -> None:
    planner = checkpoint.ShardPlanner(TINY)
    first = planner.next_shard(1)
    assert [t[0] for t in first] == ["model.embed_tokens.weight"]
    assert planner.next_shard(1)[0][0] == "model.layers.0.input_layernorm.weight"


def test_a_written_shard_is_a_safetensors_file_of_random_bytes(tmp_path: Path) -> None:
    tensors = checkpoint.ShardPlanner(TINY).next_shard(30_000)
    written = [checkpoint.write_shard_file(str(tmp_path / f"s{seed}.safetensors"), tensors, seed) for seed in (1, 2)]
    raw = (tmp_path / "s1.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    assert length % 8 == 0 and header.pop("__metadata__") == {"format": "pt"}
    offset = 0
    for name, dtype, shape in tensors:  # back to back, in the plan's order, as safetensors lays them out
        assert header[name] == {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + base.nbytes(dtype, shape)],
        }
        offset += base.nbytes(dtype, shape)
    assert len(raw) == written[0]["bytes"] == 8 + length + offset
    assert base.read_header(tmp_path / "s1.safetensors")[1] == header
    data = raw[8 + length :]
    assert data != (tmp_path / "s2.safetensors").read_bytes()[8 + length :]  # each seed its own bytes
    assert data.count(0) < len(data) / 100  # random, not zeros (METHOD.md: zeros hide unwritten data)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_each_tensor_is_copied_once_across_the_ranks_or_whole_to_each(n: int) -> None:
    header: dict[str, Any] = {
        name: {"dtype": dtype, "shape": shape}
        for name, dtype, shape in checkpoint.ShardPlanner(TINY).next_shard(200_000)
    }
    plans = [checkpoint.slice_plan(header, rank, n) for rank in range(n)]
    for index, name in enumerate(sorted(header)):
        slices = [plan[index] for plan in plans]
        assert {s.name for s in slices} == {name}
        shape, dim = header[name]["shape"], base.tp_dim(name)
        if dim is None or n == 1:
            assert all(s.dim is None and s.nbytes == base.nbytes(header[name]["dtype"], shape) for s in slices)
            continue
        covered = sorted((s.start, s.start + s.length) for s in slices)
        assert covered[0][0] == 0 and covered[-1][1] == shape[dim]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))  # no gap, no overlap
    replicated = sum(s.nbytes for s in plans[0] if s.dim is None)
    sliced_whole = sum(
        base.nbytes(header[s.name]["dtype"], header[s.name]["shape"]) for s in plans[0] if s.dim is not None
    )
    assert sum(checkpoint.expected_copy_bytes([header], rank, n) for rank in range(n)) == n * replicated + sliced_whole
    # vLLM slices what load_rate.lazy_load slices: the row-parallel layers on their input dimension.
    down = next(s for s in plans[0] if s.name.endswith("experts.0.down_proj.weight_packed"))
    assert down.dim == (None if n == 1 else 1)


def test_kimis_own_dimensions_split_evenly_for_tp8() -> None:
    planner = checkpoint.ShardPlanner()
    header = {name: {"dtype": d, "shape": s} for name, d, s in planner.next_shard(8 * 10**9)}  # a layer and more
    assert len(header) > 3 * base.KIMI.experts
    assert len(checkpoint.slice_plan(header, 7, 8)) == len(header)
    with pytest.raises(ValueError, match="does not split into 3 equal slices"):
        checkpoint.slice_plan(header, 0, 3)


def test_readers_take_whole_shards_in_turn() -> None:
    paths = [Path(f"s{i}") for i in range(10)]
    shares = checkpoint.reader_shards(paths, 4)
    assert shares[0] == [Path("s0"), Path("s4"), Path("s8")] and shares[3] == [Path("s3"), Path("s7")]
    assert sorted(p for share in shares for p in share) == sorted(paths)


def test_leading_shards_fit_the_budget_in_whole_rounds() -> None:
    sizes = [4, 3, 3, 3, 3, 3, 3, 3]
    assert checkpoint.leading_shards(sizes, 10) == 3
    assert checkpoint.leading_shards(sizes, 10, multiple=2) == 2
    assert checkpoint.leading_shards(sizes, 6, multiple=4) == 0
    assert checkpoint.leading_shards(sizes, 1000, multiple=3) == 6


def test_the_next_shards_grow_with_the_write_rate_within_the_disk_and_to_the_minimum_where_time_allows() -> None:
    gb = checkpoint.GB
    # 100 s left at 1 GB/s: 100 GB more, over 50 shards.
    assert checkpoint.next_shard_bytes(20 * gb, 50, 100, 1 * gb, 500 * gb, 120 * gb) == pytest.approx(2 * gb)
    # The disk holds 60 GB more: that, whatever the rate.
    assert checkpoint.next_shard_bytes(20 * gb, 50, 1000, 1 * gb, 60 * gb, 120 * gb) == pytest.approx(1.2 * gb)
    # A slow disk: the minimum of 120 GB in all where it is written within the grace past the time left
    # (50 s left and 60 s of grace hold the 100 GB still missing) and the disk holds it ...
    assert checkpoint.next_shard_bytes(20 * gb, 50, 50, 1 * gb, 500 * gb, 120 * gb) == pytest.approx(2 * gb)
    assert checkpoint.next_shard_bytes(20 * gb, 50, 50, 1 * gb, 50 * gb, 120 * gb) == pytest.approx(1 * gb)
    # ... and what the time left and the grace write, where it is not: the loads keep their time.
    assert checkpoint.next_shard_bytes(20 * gb, 50, 10, 1 * gb, 500 * gb, 120 * gb) == pytest.approx(70 / 50 * gb)
    assert checkpoint.next_shard_bytes(20 * gb, 50, 10, 1 * gb, 500 * gb, 120 * gb, grace_s=0) == pytest.approx(
        0.2 * gb
    )
    assert checkpoint.next_shard_bytes(20 * gb, 0, 10, 1 * gb, 50 * gb, 120 * gb) == 0
    assert checkpoint.next_shard_bytes(20 * gb, 8, -5, 1 * gb, -1 * gb, 0) == 0


def test_write_checkpoint_of_a_fixed_size(tmp_path: Path) -> None:
    written, sizing = tp8_load.write_checkpoint(
        tmp_path, 2, 0.003, time.monotonic() + 60, dims=TINY, reserve_gb=0, log=lambda _: None
    )
    assert len(written.paths) == checkpoint.SHARDS and written.paths[0].name == "model-00001-of-00064.safetensors"
    assert [p.stat().st_size for p in written.paths] == written.sizes
    assert 3_000_000 <= written.bytes <= 3_000_000 + checkpoint.SHARDS * 40_000  # a tensor more a shard at most
    assert sizing["mode"] == "fixed (--size)" and sizing["stopped_by"] == "all shards written"
    assert len(sizing["rounds"]) == 32 and all(r["shards"] == 2 for r in sizing["rounds"])
    assert sizing["rounds"][-1]["resident_all_written"] >= 0.98  # the page cache holds what was written
    names = [name for header in written.headers() for name in header]
    assert len(names) == len(set(names))


def test_write_checkpoint_grows_to_the_room_it_is_given(tmp_path: Path) -> None:
    written, sizing = tp8_load.write_checkpoint(
        tmp_path, 4, None, time.monotonic() + 60, dims=TINY, minimum_gb=0.001, max_gb=0.002, reserve_gb=0,
        log=lambda _: None,
    )  # fmt: skip
    assert sizing["mode"] == "grown as written" and sizing["max_gb"] == 0.002
    assert len(written.paths) == checkpoint.SHARDS
    assert 1_900_000 <= written.bytes <= 2_000_000 + 8 * 40_000
    assert sizing["write_gbps"] > 0 and len(sizing["rounds"]) == 16


def test_read_back_reads_what_the_page_cache_dropped(tmp_path: Path) -> None:
    shards = [tmp_path / f"s{i}" for i in range(3)]
    for index, shard in enumerate(shards):
        checkpoint.write_shard_file(str(shard), checkpoint.ShardPlanner(TINY).next_shard(100_000), index)
    assert tp8_load.read_back(shards) == {"shards_read": 0}
    fd = os.open(shards[1], os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages (the writer fsynced) leave the cache
    finally:
        os.close(fd)
    if (base.resident_fraction([shards[1]]) or 0) > 0.5:
        pytest.skip("this filesystem keeps its pages (tmpfs): nothing to read back")
    read = tp8_load.read_back(shards)
    assert read["shards_read"] == 1 and read["gb"] == shards[1].stat().st_size / 1e9
    assert base.resident_fraction(shards) == 1.0


def result(rank: int, start: float, seconds: float, copied: float, read: float | None = None) -> dict[str, Any]:
    out = {"rank": rank, "start": start, "end": start + seconds, "copied_bytes": int(copied)}
    return out if read is None else out | {"read_bytes": int(read)}


def test_aggregate_takes_the_load_from_the_first_start_to_the_last_end() -> None:
    gb = checkpoint.GB
    results = [result(rank, 100.0 + rank * 0.01, 9.0 + rank * 0.1, 20 * gb, 160 * gb) for rank in range(8)][::-1]
    record = tp8_load.aggregate(results, int(160 * gb), UUIDS)
    wall = (100.07 + 9.7) - 100.0
    assert record["processes"] == 8 and record["seconds"] == round(wall, 3)
    assert record["checkpoint_gbps"] == round(160 / wall, 3)
    assert record["copied_gbps_all_gpus"] == round(160 / wall, 3) and record["read_gb_as_tensors_all_gpus"] == 1280
    assert record["start_spread_s"] == 0.07
    assert [g["rank"] for g in record["per_gpu"]] == list(range(8)) and record["per_gpu"][3]["gpu"] == UUIDS[3]
    assert record["per_gpu"][0]["gbps"] == round(20 / 9.0, 3)
    with pytest.raises(ValueError):
        tp8_load.aggregate([], 1)


def test_links_alone_and_together() -> None:
    size = 1 << 30
    results = [
        {
            "rank": rank,
            "size_gib": 1.0,
            "alone": {"pinned_gbps": 50.0 + rank, "pageable_gbps": 9.0},
            "together": {
                "pinned": {"start": 10.0, "end": 10.5, "bytes": 5 * size},
                "pageable": {"start": 20.0, "end": 20.0 + 1 + rank / 10, "bytes": 5 * size},
            },
        }
        for rank in range(8)
    ]
    links = tp8_load.aggregate_links(results, UUIDS)
    assert [a["pinned_gbps"] for a in links["alone"]] == [50.0 + r for r in range(8)]
    assert links["alone"][5]["gpu"] == UUIDS[5]
    assert links["together"]["pinned_gbps"] == round(8 * 5 * size / 1e9 / 0.5, 3)
    assert links["together"]["pageable_gbps"] == round(8 * 5 * size / 1e9 / 1.7, 3)
    assert links["together"]["pageable_per_gpu_gbps"][0] == round(5 * size / 1e9, 3)


def warm_record(n: int = 8, gb: float = 150.0, resident: float = 1.0) -> dict[str, Any]:
    """A record as tp8_load.main assembles one, from its own functions, with invented timings."""
    total = int(gb * checkpoint.GB)
    passes = [
        {**tp8_load.aggregate([result(r, 0.0, seconds + r / 100, total / n) for r in range(n)], total, UUIDS[:n]),
         "shards": 64, "slices_as_planned": True}
        for seconds in (10.0, 9.5)
    ]  # fmt: skip
    gpus = {"count": n, "names": ["NVIDIA H100 80GB HBM3"] * n, "uuids": UUIDS[:n]}
    record = tp8_load.record_head(n, gpus, ["--out", "/out"], "python3 -m bench.device.tp8_load --out /out", 0.0)
    record["checkpoint"] = {"shards": 64, "gb": gb}
    record["warm_tp"] = tp8_load.warm_tp_section(passes, resident, resident)
    return record


def test_the_record_is_what_models_downtime_reads(tmp_path: Path) -> None:
    record = warm_record()
    assert record["warm_tp"]["checkpoint_gbps"] == round(150 / 10.07, 3)  # the slower pass
    assert [p["seconds"] for p in record["warm_tp"]["passes"]] == [10.07, 9.57]
    path = tmp_path / tp8_load.record_name("NVIDIA H100 80GB HBM3", 8, "2026-12-07")
    assert path.name == "h100x8-tp8-load-2026-12-07.json"
    path.write_text(json.dumps(record))
    rate = downtime.read_tp8_record(path)
    assert rate.gb_per_second == record["warm_tp"]["checkpoint_gbps"]
    assert "h100x8-tp8-load-2026-12-07.json, `warm_tp.checkpoint_gbps`" in rate.source
    assert "H100" in tp8_load.summary(record) and "14.896 GB/s" in tp8_load.summary(record)


def test_the_downtime_fixture_has_the_shape_the_script_writes() -> None:
    """tests/fixtures/device-records/ stands in for a real run in the forecast's tests: it must keep the keys
    tp8_load.py writes, or those tests would pass on a record the script never makes."""

    def keys(value: Any, prefix: str = "") -> set[str]:
        if not isinstance(value, dict):
            return set()
        return {prefix + k for k in value} | {x for k, v in value.items() for x in keys(v, f"{prefix}{k}.")}

    fixture = json.loads((DEVICE_FIXTURES / "h100x8-tp8-load-fixture.json").read_text())
    made = warm_record()
    for section in ("warm_tp", "gpus"):
        assert keys(made[section]) <= keys(fixture[section]), section
    assert {k for k in made if k != "checkpoint"} <= set(fixture)


def test_gpu_slug_names_the_model() -> None:
    assert gpu_facts.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_facts.gpu_slug("NVIDIA H200") == "h200"
    assert gpu_facts.gpu_slug("NVIDIA A100-SXM4-80GB") == "a100"
    assert (
        gpu_facts.gpu_slug("NVIDIA RTX PRO 6000 Blackwell Server Edition")
        == "nvidia-rtx-pro-6000-blackwell-server-edition"
    )


# `nvidia-smi topo -m` as its legend describes it (tab-separated; X self, NV# bonded NVLinks, SYS across
# NUMA nodes): an 8-GPU SXM board and 8 PCIe cards. Written for these tests, not recorded.
NVLINK_TOPO = (
    "\t" + "\t".join([f"GPU{i}" for i in range(8)] + ["NIC0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\n"
)
for _row in range(8):
    _cells = [" X " if c == _row else "NV18" for c in range(8)]
    NVLINK_TOPO += (
        "\t".join(
            [
                f"GPU{_row}",
                *_cells,
                "PIX" if _row == 0 else "SYS",
                "0-47" if _row < 4 else "48-95",
                str(_row // 4),
                "",
                "N/A",
            ]
        )
        + "\n"
    )
NVLINK_TOPO += (
    "NIC0\tPIX"
    + "\tSYS" * 7
    + "\t X \n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
PCIE_TOPO = NVLINK_TOPO.replace("NV18", "SYS")


def test_topology_of_an_nvlink_board() -> None:
    topo = gpu_facts.parse_topo(NVLINK_TOPO)
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)]
    assert len(topo["links"]) == 56 and set(topo["links"].values()) == {"NV18"}
    assert topo["affinity"]["GPU5"] == {"CPU Affinity": "48-95", "NUMA Affinity": "1"}
    assert gpu_facts.nvlink_between_all(topo) is True
    assert gpu_facts.form_factor(["NVIDIA H100 80GB HBM3"] * 8, True) == "SXM (NVLink between every pair of GPUs)"


def test_topology_of_pcie_cards_and_of_one_gpu() -> None:
    topo = gpu_facts.parse_topo(PCIE_TOPO)
    assert gpu_facts.nvlink_between_all(topo) is False
    assert gpu_facts.form_factor(["NVIDIA H100 PCIe"] * 8, False) == "PCIe"
    assert gpu_facts.form_factor(["NVIDIA H200 NVL"] * 8, False) == "PCIe"
    assert gpu_facts.form_factor(["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 8, False) == "unknown"
    spaced = gpu_facts.parse_topo(PCIE_TOPO.replace("\t", "    "))  # a copy that lost its tabs
    assert spaced["links"] == topo["links"] and spaced["affinity"] == topo["affinity"]
    one = gpu_facts.parse_topo("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n")
    assert one["gpus"] == ["GPU0"] and one["links"] == {} and gpu_facts.nvlink_between_all(one) is None
    with pytest.raises(ValueError, match="no matrix"):
        gpu_facts.parse_topo("NVML: Unable to determine the device handle")


def test_nvlink_status_counts_each_gpus_links() -> None:
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"
        + "".join(f"\t Link {i}: 26.562 GB/s\n" for i in range(18))
        + "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n\t Link 0: <inactive>\n\t Link 1: 26.562 GB/s\n"
    )
    assert gpu_facts.parse_nvlink_status(text) == {
        "0": {"active": 18, "inactive": 0},
        "1": {"active": 1, "inactive": 1},
    }
    assert gpu_facts.parse_nvlink_status("") == {}


def test_query_reads_each_gpus_fields() -> None:
    text = (
        "==============NVSMI LOG==============\n\nDriver Version                            : 580.159.04\n"
        "Attached GPUs                             : 2\n"
        "GPU 00000000:18:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n"
        "    Minor Number                          : 0\n    PCI\n        Bus Id                            : 00000000:18:00.0\n"
        "GPU 00000000:2A:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n"
        "    Minor Number                          : 1\n"
    )
    gpus = gpu_facts.parse_query(text)
    assert gpus == [
        {"Product Name": "NVIDIA H100 80GB HBM3", "Minor Number": "0", "Bus Id": "00000000:18:00.0"},
        {"Product Name": "NVIDIA H100 80GB HBM3", "Minor Number": "1"},
    ]


def test_the_8_gpu_call_is_one_command_of_the_device_tool() -> None:
    """bench/device/README.md's command: one line within the device tool's 2,000 characters, both scripts,
    their time limits inside one 10-minute call and the load's budget inside its limit."""
    readme = (ROOT / "bench" / "device" / "README.md").read_text()
    command = readme.split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert "\n" not in command and len(command) <= 2000
    assert 'timeout -k 5 120 python3 -m bench.device.guard_eight_gpus --out "$OUT"' in command
    assert 'timeout -k 10 445 python3 -m bench.device.tp8_load --out "$OUT" --budget-s 410' in command
    limits = [int(kill) + int(seconds) for kill, seconds in re.findall(r"timeout -k (\d+) (\d+)", command)]
    assert len(limits) == 2 and sum(limits) <= 590


class StandInGpus:
    """tp8_load.GpuPool's stand-in: no processes, no CUDA; each step answers what N GPUs would report, from
    what the step was given (the bytes each rank's slices or shards hold), with invented times."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.steps: list[str] = []

    def start(self) -> None:
        pass

    def wait_ready(self, timeout: float = 0) -> list[dict[str, Any]]:
        return [{"rank": rank, "ready": True, "gpu": "stand-in"} for rank in range(self.n)]

    def stop(self) -> None:
        self.steps.append("stop")

    def run(self, op: str, per_rank: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
        self.steps.append(op)
        if op == "links":
            run = {"start": 1.0, "end": 1.1, "bytes": 5 << 30}
            together = {"pinned": run, "pageable": run | {"end": 2.0}}
            return [
                {"rank": r, "size_gib": 1.0, "alone": {"pinned_gbps": 50.0}, "together": together}
                for r in range(self.n)
            ]
        out = []
        for rank, kwargs in enumerate(per_rank):
            paths = [Path(p) for p in kwargs["paths"]]
            if op == "tp_load":
                headers = [base.read_header(p)[1] for p in paths]
                copied = checkpoint.expected_copy_bytes(headers, rank, self.n)
                out.append({"rank": rank, "start": 5.0, "end": 6.0, "copied_bytes": copied, "read_bytes": 0})
            else:
                copied = sum(p.stat().st_size for p in paths)
                out.append({"rank": rank, "start": 5.0, "end": 5.5, "copied_bytes": copied, "shards": len(paths)})
        return out


def test_the_run_writes_its_record_step_by_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools: list[StandInGpus] = []
    uuids = UUIDS[:2]
    gpus = {"count": 2, "names": ["NVIDIA H100 80GB HBM3"] * 2, "uuids": uuids}
    monkeypatch.setattr(tp8_load, "gpu_facts", lambda: gpus)

    def stand_in(n: int) -> StandInGpus:
        pools.append(StandInGpus(n))
        return pools[-1]

    monkeypatch.setattr(tp8_load, "GpuPool", stand_in)
    # Never this shared machine's page cache: a drop that says it worked, with nothing resident after it.
    monkeypatch.setattr(base, "drop_caches", lambda paths: {"ok": True, "resident_after": 0.0})
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--out", str(out), "--gpus", "2", "--size", "0.003", "--dir", str(tmp_path), "--budget-s", "300"]
    assert tp8_load.main(argv, dims=TINY) == 0
    (path,) = out.glob("*.json")
    assert path.name == f"h100x2-tp2-load-{time.strftime('%Y-%m-%d', time.gmtime())}.json"
    record = json.loads(path.read_text())
    assert pools[0].steps[:2] == ["links", "tp_load"] and pools[0].steps[-1] == "stop"
    assert record["kind"] == "tp-load" and record["tp"] == 2 and record["gpus"] == gpus
    assert record["checkpoint"]["shards"] == 64 and record["checkpoint"]["sizing"]["mode"] == "fixed (--size)"
    warm = record["warm_tp"]
    assert warm["slices_as_planned"] is True and warm["resident_before"] >= 0.98
    assert set(warm["prewarm"]) >= {"shards_read"}  # what the page cache had dropped, read back first
    assert warm["seconds"] == 1.0 and warm["checkpoint_gb"] == record["checkpoint"]["gb"]
    assert [g["gpu"] for g in warm["per_gpu"]] == uuids
    assert record["warm_readers"]["shards"] == 64 and record["warm_readers"]["seconds"] == 0.5
    direct, cold = record["cold_readers_direct"], record["cold_tp"]
    assert direct["shard_indices"] == list(range(32)) and direct["source"].startswith("O_DIRECT")
    assert cold["shard_indices"] == list(range(32, 64)) and cold["slices_as_planned"] is True
    assert not (tmp_path / "vllm-fleet-tp-load").exists()  # the shards are gone
    assert "warm, TP2 vLLM-style, checkpoint" in tp8_load.summary(record)
    with pytest.raises(ValueError, match="TP 2, not 8"):
        downtime.read_tp8_record(path)
