"""LoRA adapters in the stack config: the adapters themselves (vllm-fleet:adapters) and the engine's LoRA
limits (serving.lora). How a deployment lists them and where their files go is models/config.py's;
the rules across keys are models/rules.adapter_errors."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from models.base import ConfigModel, not_true_or_false
from models.types import Float, HfRepo, Int, Name, Revision

# The LoRA ranks vLLM's --max-lora-rank accepts.
LoraRank = Annotated[Literal[1, 8, 16, 32, 64, 128, 256, 320, 512], BeforeValidator(not_true_or_false)]


class LoraLimits(ConfigModel):
    """LoRA adapters served by the engine (vLLM's --enable-lora and its limits). Setting this changes the
    engine's launch (one restart); adapters come and go afterwards with no restart (vllm-fleet:adapters)."""

    max_loras: Annotated[
        Int,
        Field(
            ge=1,
            le=256,
            description="Adapters in one batch (--max-loras) and held in CPU memory (--max-cpu-loras, at least "
            "max-loras).",
        ),
    ] = 4
    max_lora_rank: LoraRank = Field(16, description="vLLM's `--max-lora-rank`: the largest rank an adapter may have")
    max_cpu_loras: Annotated[Int, Field(ge=1, le=4096)] | None = Field(None, description="vLLM's `--max-cpu-loras`")

    @model_validator(mode="after")
    def _cpu_holds_the_batch(self) -> Self:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"maxCpuLoras {self.max_cpu_loras} is below maxLoras {self.max_loras}: vLLM refuses it")
        return self

    @property
    def adapters_held(self) -> int:
        """How many adapters the engine keeps loaded at once (the CPU cache, --max-loras unless set)."""
        return self.max_cpu_loras or self.max_loras


class AdapterSpec(ConfigModel):
    """A LoRA adapter (vllm-fleet:adapters.<name>): clients send <name> as `model` to a deployment that lists it.
    Its files sit on the deployment's storage beside the models (adapters/<name>), downloaded, verified,
    kept and removed like a model's; the engine loads it at runtime, so adding, updating or removing one
    restarts nothing."""

    repo: HfRepo = Field(description="the Hugging Face repository of the adapter")
    revision: Revision = Field("main", description="the commit to download; a production stack needs the 40-hex commit")
    bases: Annotated[
        tuple[Name, ...],
        Field(
            min_length=1,
            description="The models it was trained on or fits (same architecture and shapes): a deployment serving "
            "another model cannot list it. Its adapter_config.json must name one of their repos as its base.",
        ),
    ]
    size_gb: Annotated[Float, Field(gt=0, description="its size on disk, counted in the storage's capacity")] = 0.1
    keep: bool = Field(False, description="keep its files when no deployment serves it")


class ResolvedAdapter(ConfigModel):
    """An adapter a deployment serves, with where its files are and what its bases are on disk."""

    name: Name
    spec: AdapterSpec
    path: str
    # The directories and repos of the models it fits (an engine loads it when it serves one of them).
    base_dirs: tuple[str, ...]
    base_repos: tuple[str, ...]


def adapter_download_name(name: str) -> str:
    """An adapter's download among the storage's downloads, and its directory there: adapter-<name>."""
    return f"adapter-{name}"
