"""The processes benchmarks/ commands start, one each: a run (run.py, compare's worker), the
device experiments' and device scopes' workers, the links' all-reduce probe, and one
framework's ViT defaults (vit_defaults.py). Internal: users run the commands."""
