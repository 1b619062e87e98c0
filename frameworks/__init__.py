"""One package per framework, each with the same files: devices.py (the device API),
models.py (each model of common/models in the framework's ops), scratch.py (the
chapter's primitives), native.py (the framework's own data parallelism) and ops.py
(the device experiments' calls). Import one through common.facts.registry.get(name),
never all at once."""
