"""Pure functions that render what runs on a host: the vLLM units, their environment, and every script.

Nothing here imports Pulumi or touches a host, so every output is golden-tested and checked by
`systemd-analyze verify` and `shellcheck` (tests/test_render.py). Templates, and the scripts sent whole before
the host's tools exist, are files beside the code that renders them, in `render/templates/`; a step's script is the host package's (host/steps/), and its command
one call of the host's `step` tool with the parameters rendered here. The modules, each importing only those
before it:
  paths    where things are, in this repository and on a host
  host_bundle  the host package as one archive, a launcher per tool, the bootstrap that runs it unsent
  scripts  a step's parameters and the command that runs it (the host's `step` tool), a script sent whole
  launch   the engine's command line and environment, by the host's vLLM version
  units    the systemd units of a deployment's engines
  access   who may call a deployment: the front door's access files and their step
  plan     what host/tools/swap.py does for a deployment
  report   the post-deploy report: what to ask host/status.py, its step, the outputs from its answer
  steps    the parameters of each step
"""
