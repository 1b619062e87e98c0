"""The entry points: every module here with a main() is a command, `python -m
benchmarks.<name>` (the README's table lists them, and a test checks it does); the
*_worker modules run one job in a process of their own for a command, and the
*_reference modules are plain framework programs that the suite is measured against."""
