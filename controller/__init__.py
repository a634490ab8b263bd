"""What the program does around the components: it reads the stack config and its secrets, reads the hosts
in every run (the survey over SSH, controller/survey.py) and judges them (the one swap judgement, drift and
its repairs, the forecast), keeps cordoned hosts as they are, and packages the host tools. Nothing here
creates a resource."""
