"""Running one plan: in this process, in a rank process per device (launcher), or
across machines on each framework's own engine (nodes) over a network of one of the
kinds in networks; rank is a rank's entry point, run turns any of them into a record,
progress the lines they tell."""
