"""What the test files run or import, apart from them: programs each run in a process of
its own (`python -m tests.helpers.<name>`: a framework's conformance checks, its device
scopes', utilisation and ViT checks, model mode's ranks, a communication setting's engine on
two ranks, the worker server, a Slurm cluster, the kernel paths, the false-alarm count)
and the checks and plants those share (the profile's, the link faults'). docs/testing.md
says which test file runs which."""
