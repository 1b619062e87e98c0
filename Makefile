# make compare : set everything up, then compare every framework on Fashion-MNIST
# make test    : set everything up, then run the whole test suite
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
FMNIST := /usr/share/datasets/fashion-mnist
ARGS   ?=

.PHONY: compare test install data clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,test]'
	touch $(STAMP)

# Real Fashion-MNIST from Debian's package; without it, compare looks in the user's
# cache and then downloads from the dataset's mirror (see README).
data:
	@test -d $(FMNIST) || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist; } || \
	  echo "note: could not install Debian's dataset-fashion-mnist; compare will look elsewhere"

compare: $(STAMP) data
	$(PY) -m benchmarks.compare --framework all $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

clean:
	rm -rf $(VENV) results .pytest_cache
