"""Moved to render/host_bundle.py: building the host package is a pure function of host/'s files, and
render/steps.py ships it, so it lives below the steps rather than above them.

Only controller/survey.py still imports it from here; once that import names render.host_bundle, this
file goes.
"""

from render.host_bundle import bootstrap_source, version

__all__ = ["bootstrap_source", "version"]
