"""One package per framework, each with the same files: devices, lenet, scratch,
native. Import one through common.registry.get(name), never all at once."""
