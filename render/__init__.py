"""Pure functions that render what runs on a host: the vLLM units, their environment, and every script.

Nothing here imports Pulumi or touches a host, so every output is golden-tested and checked by
`systemd-analyze verify` and `shellcheck` (tests/test_render.py). Templates and script bodies are files
beside the components that ship them, in `components/files/`. The modules, each importing only those
before it:
  paths    where things are, in this repository and on a host
  host_bundle  the host package as one archive, a launcher per tool, the bootstrap that runs it unsent
  scripts  a script body with its parameters bound; heredoc files; the SSH invocation of a script
  launch   the engine's command line and environment, by the host's vLLM version
  units    the systemd units of a deployment's engines
  access   who may call a deployment: the front door's access files and their step
  plan     what host/swap.py does for a deployment
  report   the post-deploy report: what to ask host/status.py, its step, the outputs from its answer
  steps    the script of each step
"""
