# Two commands do all the set-up (see README):
#   make run    install sesame in .venv (CPU torch) and run the default fine-tuning + evaluation
#   make test   install if needed and run the test suite offline
# and the documentation site (docs/, mkdocs.yml): make docs serves it, make docs-build checks and writes site/
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

.PHONY: install run test bench docs docs-build

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The CPU build of torch first, so no dependency pulls a multi-GB CUDA build. pip compiles every installed file to
# bytecode one by one (about 60 s of a 115 s install on 2 cores); compileall does the same on every core at once.
# A file that does not compile under this Python (torch ships a 3.12-only test helper) is skipped, as pip skips it.
$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet --no-compile torch==2.13.0
	$(BIN)/pip install --quiet --no-compile -e ".[test,plot,report,sweep,ray,export,lora,tensorboard]"
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null || true
	touch $@

install: $(VENV)/.installed

run: install
	$(OFFLINE) $(BIN)/sesame-train $(ARGS)

# -n auto: one worker per core (tests are single-threaded and keep to their own tmp folders); --dist loadscope: a
# test module runs on one worker, so the runs its module fixtures train are made once (tests/conftest.py collects
# the longest modules first); the 15 slowest tests are listed at the end.
test: install
	$(OFFLINE) $(BIN)/python -m pytest -q -n auto --dist loadscope --durations=15 $(ARGS)

# The documentation site at http://127.0.0.1:8000, rebuilt on every edit.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# --strict: a broken link, anchor or API reference is an error (tests/test_docs_site.py builds it the same way).
docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
