"""What the program does around the components: it reads the stack config and its secrets, checks the
hosts before anything is declared, and keeps cordoned hosts as they are. Nothing here creates a resource."""
