"""What the tests and bench/ share: the repository's paths, the real engine, the sandbox and one
end-to-end module's stack on it (sandbox_stack), running local programs (processes), Pulumi mocks.

Test modules import from here, never from one another; bench/ imports only this package."""
