"""The processes benchmarks/ commands start, one each: a run (run.py, compare's worker), the
device experiments' and device scopes' workers, and the links' all-reduce probe. Internal:
users run the commands."""
