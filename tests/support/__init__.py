"""What the tests and bench/ share: the repository's paths, the real engine, the sandbox, Pulumi mocks.

Test modules import from here, never from one another; bench/ imports only this package."""
