"""Pulumi component resources of vllm-fleet: one per file, each with its Args type beside it."""
