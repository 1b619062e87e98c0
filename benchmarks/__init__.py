"""Entry points: compare (the side-by-side table), worker (one run), devices (the device
experiments), vs_reference (a row against a plain program), resnet18_steps, pipeline (model
mode against the native 1-device step)."""
