"""What a replica is asked to run: the engine configurations, plain frozen values (pure).

Cells, policies and the simulator build and read these without starting anything, so this module imports
no process or HTTP code; the command lines that serve them are built in ``vllm_server`` and
``fake_engine``, and ``replica`` starts them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VllmEngineConfig(BaseModel):
    """What a replica is asked to run. Frozen and strict; the server's own report of what took effect is
    recorded separately (see ``replica.probe``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="Local model directory or model name.")
    load_format: str = Field("auto", pattern="^(auto|dummy)$", description="dummy: random weights of its shapes.")
    served_model_name: str = "model"
    device: str = Field("cpu", pattern="^(cpu|gpu)$")
    block_size: int = Field(32, ge=16, description="Tokens per KV block (CPU attention needs a multiple of 32).")
    num_kv_blocks: int | None = Field(None, ge=2, description="Fixes the KV pool size in blocks.")
    kv_cache_gib: float | None = Field(None, gt=0, description="KV pool size in GiB when blocks are not fixed.")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    max_model_len: int = Field(16384, ge=64)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=16)
    enforce_eager: bool = Field(True, description="Skips torch.compile: a 25 s shorter start on 2 CPU cores.")
    scheduling_policy: str = Field("fcfs", pattern="^(fcfs|priority)$")
    scheduler_cls: str | None = None
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs (CPU: processes) one replica shards the model over.")
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    connector_debug_log: bool = Field(False, description="Let the KV connector's debug lines through: vLLM's "
                                      "SimpleCPUOffloadConnector records its stores nowhere else.")  # fmt: skip


class FakeEngineConfig(BaseModel):
    """A replica of the fake engine (``replica.fake_engine``): no model, only the behaviour it is told to show."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    served_model_name: str = "model"
    token_delay_s: float = Field(0.0, ge=0)
    stall_after: int | None = Field(None, ge=0, description="Answer this many requests, then hang.")
    prefix_cache: bool = Field(False, description="Report prefix hits of whole 16-word blocks as cached tokens.")
    reset_keeps_cache: bool = Field(False, description="Answer a reset with success and keep the cache (a stand-in).")
    start_s: float = Field(0.0, ge=0, description="Load this long before listening, printing a line a second.")
    start_hangs: bool = Field(False, description="Never listen, print or use CPU: a start that hung.")


EngineConfig = VllmEngineConfig | FakeEngineConfig
