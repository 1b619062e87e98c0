"""One package per framework, each with the same files (FILES), so that a reader who
knows one knows all; only framework calls live here. Import one through
common.facts.registry.get(name), never all at once."""

# The files of every framework package, and what each holds (tests/test_registry.py
# checks that every package has exactly these)
FILES = {
    "__init__.py": "the Backend (common.core.contract), composed of the classes below",
    "devices.py": "the device API: the neutral names ('cpu:0', 'gpu:1') to the framework's own",
    "models.py": "a ModelOps per model of common/models, in the framework's calls",
    "scratch.py": "scratch mode's primitives: replicas, a shard's loss and gradients, "
                  "in-place allreduce and SGD (common/core/scratch.py's train_batch runs on them)",
    "native.py": "native mode: the framework's own data parallelism, as a Trainer",
    "pipeline.py": "model mode's stage calls: a stage's forward and backward, the hand-over",
    "ops.py": "the device experiments' primitives (common/experiments/ops.py)",
    "scopes.py": "the device-scopes example in the framework (common/experiments/scopes.py)",
    "profile.py": "the framework's own op-level profiler around a few steps (an OpProfiler) "
                  "and the rules that map its event names to op classes "
                  "(common/results/profile.py)",
}
