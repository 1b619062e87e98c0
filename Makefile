# make compare : set everything up, then compare every framework on Fashion-MNIST
# make test    : set everything up, then run the whole test suite
# make test-kernel-paths : the whole suite once per CPU kernel path (docs/testing.md)
# make slurm   : Debian's Slurm and munge, for the tests' real Slurm (docs/nodes.md)
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Frameworks whose pins cannot share the main environment each get one of their own,
# .venv-NAME built from constraints-NAME.txt with the extras NAME and test (the tests'
# planted-bug runs import test modules in the framework's process); the suite starts
# their processes with its interpreter (`environment` in common/facts/registry.py)
ENVS   := mxnet
STAMPS := $(STAMP) $(foreach e,$(ENVS),$(VENV)-$(e)/.installed)
FMNIST := /usr/share/datasets/fashion-mnist
ARGS   ?=

.PHONY: compare test test-kernel-paths install data allocators slurm clean

install: $(STAMPS)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,test]'
	touch $@

$(VENV)-%/.installed: pyproject.toml constraints-%.txt
	$(PYTHON) -m venv $(VENV)-$*
	$(VENV)-$*/bin/python -m pip install --quiet --upgrade pip
	$(VENV)-$*/bin/python -m pip install --quiet -c constraints-$*.txt -e '.[$*,test]'
	touch $@

# Real Fashion-MNIST from Debian's package; without it, compare looks in the user's
# cache and then downloads from the dataset's mirror (see docs/data.md).
data:
	@test -d $(FMNIST) || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist; } || \
	  echo "note: could not install Debian's dataset-fashion-mnist; compare will look elsewhere"

# Debian's jemalloc and tcmalloc, the allocators the settings preload (common/facts/settings.py;
# tests/test_setting_effects.py sees them loaded); without them those settings are refused
ALLOC := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
allocators:
	@ls $(ALLOC) >/dev/null 2>&1 || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  libjemalloc2 libtcmalloc-minimal4; } || \
	  echo "note: could not install Debian's libjemalloc2 and libtcmalloc-minimal4; the allocator settings will say why they cannot run"

# Debian's slurm-wlm (22.05) and munge: tests/test_slurm.py brings up its own controller
# and a node daemon in each emulated node (tests/helpers/slurm_cluster.py); none is started here
slurm:
	@{ command -v slurmd && command -v munged; } >/dev/null || { command -v apt-get >/dev/null && \
	  [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends slurm-wlm munge; } || \
	  { echo "make slurm: could not install Debian's slurm-wlm and munge (needs root and apt-get)"; exit 1; }

compare: $(STAMPS) data allocators
	$(PY) -m benchmarks.compare --framework all $(ARGS)

# Two test files at a time: most of a test's time is a framework's import and start-up
# in a process of its own, which a second file's work overlaps on 2 cores (the measured
# times are in docs/testing.md); a file's tests stay together (--dist loadfile), since
# they share their cached runs.
test: $(STAMPS) allocators
	$(PY) -m pytest -n 2 --dist loadfile $(ARGS)

# The suite under each kernel path this CPU can run (the machine's own, torch's dispatch
# capped at default / avx2 / avx512, oneDNN capped at AVX2): about five times make test
test-kernel-paths: $(STAMPS)
	$(PY) -m tests.helpers.kernel_paths $(ARGS)

clean:
	rm -rf $(VENV) $(foreach e,$(ENVS),$(VENV)-$(e)) results .pytest_cache
