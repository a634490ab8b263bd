"""What the program does around the components: it reads the stack config and its secrets, reads the hosts
in every run (the survey over SSH, controller/survey.py) and judges them (the one swap judgement, drift and
its repairs, the forecast) and keeps cordoned hosts as they are. Nothing here creates a resource; the host
tools' package is rendered by render/host_bundle.py (docs/architecture.md says who imports whom)."""
