"""What the tests share and nothing else uses: the repository's paths and the recorded fixtures, one
end-to-end module's stack on the sandbox (sandbox_stack), the stack files as data, Pulumi mocks, the host
package installed locally.

Test modules import from here (and from sandbox/: the real engine, the sandbox host and its mirror, running
local programs, which bench/ uses too), never from one another."""
