"""The bottom layer: what is known without running anything. The framework facts
table (registry), the neutral device names, the machine, the data."""
