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

# The CPU build of torch first, so no dependency pulls a multi-GB CUDA build (pip takes it from the machine's disk).
# The rest through uv, asked to keep that torch: it resolves and installs the same releases as pip (the same
# `pip freeze`) in about 6 s against pip's 50 s on 2 cores. No bytecode is compiled here: `make test` lets each
# module be compiled when first imported (8,415 of the 22,132 files in a full test run), so the 30 s of compiling them all goes.
$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet --no-compile torch==2.13.0
	$(BIN)/pip install --quiet --no-compile uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python torch==2.13.0 -e ".[test,plot,report,sweep,ray,export,lora,tensorboard]"
	touch $@

install: $(VENV)/.installed

run: install
	$(OFFLINE) env -u PYTHONDONTWRITEBYTECODE $(BIN)/sesame-train $(ARGS)

# -n auto: one worker per core (tests are single-threaded and keep to their own tmp folders); --dist loadscope: a
# test module runs on one worker, so the runs its module fixtures train are made once (tests/conftest.py collects
# the longest modules first); the 15 slowest tests are listed at the end. Bytecode is written as modules are first
# imported (the install compiles none), even where the environment sets PYTHONDONTWRITEBYTECODE.
test: install
	$(OFFLINE) env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n auto --dist loadscope --durations=15 $(ARGS)

# The documentation site at http://127.0.0.1:8000, rebuilt on every edit.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# --strict: a broken link, anchor or API reference is an error (tests/test_docs_site.py builds it the same way).
docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
