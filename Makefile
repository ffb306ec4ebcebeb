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

# The app on the shipped default dataset, headless: open the printed URL (PORT=8501 by default).
PORT    ?= 8501
run: $(STAMP)
	$(PY) -m app.serve --server.headless true --server.port $(PORT) \
		--browser.gatherUsageStats false

# The default run leaves out tests marked slow (make test-all runs them too).
test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.speed
