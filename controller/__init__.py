"""The controller's own code that creates no resource: loading the stack, reading hosts over SSH (survey,
status), the cordon registry, and packaging the host tools."""
