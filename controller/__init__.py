"""What the program does around the components: it reads the stack config and its secrets, checks the
hosts before anything is declared (the survey over SSH and the one swap judgement), keeps cordoned hosts
as they are, reads what deployments do for `make status`, and packages the host tools. Nothing here
creates a resource."""
