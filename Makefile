# Two commands do all set-up on a fresh machine:
#   make run    set up .venv (first time) and run the main job
#   make test   set up .venv (first time) and run the test suite
PY      := .venv/bin/python
STAMP   := .venv/.installed

.PHONY: run test test-all setup bench
setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

run: $(STAMP)
	.venv/bin/eplb plan --loads datasets/examples/readme.json --replicas 16 --groups 4 --nodes 2 --gpus 8 --out plan.json
	.venv/bin/eplb score --loads datasets/examples/readme.json --plan plan.json

# The default run leaves out tests marked slow (make test-all runs them too).
test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.speed
