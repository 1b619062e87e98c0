"""The training core: the contract every framework package implements, a run's plan,
the modes, the chapter's scratch step, model mode's pipeline, and the one epoch loop."""
