"""Everything that is the same for every framework, in packages of one job each,
imported from the top down (checked by import-linter: pyproject.toml):

    reports       tables, Markdown and plots rendered from record files
    experiments   the chapter's device experiments and the device-scopes example
    launch        one run: in this process, in rank processes, across machines
    results       the run record: schema, file names, atomic files
    core          the training core: contract, plan, modes, scratch step, pipeline, epoch loop
    models        the models in NumPy: parameters, shared initial weights, the oracle
    facts         the framework facts table, devices, the machine, the data

Importing common imports no framework: frameworks are loaded on demand by
common.facts.registry.get(name)."""
