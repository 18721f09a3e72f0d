# Each target creates .venv (torch pinned by constraints.txt) if it is missing. The demo needs
# only the package (`pip install -e .`, a minute or two); the other targets add the dev extra
# (test tools, Hugging Face, llama.cpp for the GGUF tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed
export SCRATCHFORMER_DATA ?= $(abspath ../shared/data)

.PHONY: demo test lint format docs bench bench-check results install

install: $(STAMP)

$(RUNTIME): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e .
	touch $(RUNTIME)

# llama-cpp-python (the tests' llama.cpp) compiles from source, about ten minutes on two
# cores: on every core, without the multimodal library that nothing here uses.
$(STAMP): $(RUNTIME)
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(RUNTIME)
	$(BIN)/scratchformer demo --out runs/demo --overwrite

# One worker a core (pytest-xdist). worksteal hands each worker a contiguous half of the
# tests (so a file's module fixtures are mostly built once) and lets an idle worker take tests
# from the end of the other's share. The 15 slowest tests are listed, to keep the suite
# within its ten minutes on two cores. pytest exits 5 when it collects no tests; that is not
# a failure of the code.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist worksteal --durations=15; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The generated parts of docs/ (recipe keys, command line, quoted code, the guide's
# pictures and notebook, the speed and paper-defaults tables), from the code and data.
docs: $(STAMP)
	$(BIN)/python docs/build.py

# Minutes: our layers against torch.nn's, then whole models against torch.nn and Hugging Face
# (speed.py's generate workload is generate.py's comparison with Hugging Face; run
# benchmarks/generate.py itself for ours without the KV cache).
bench: $(STAMP)
	$(BIN)/python benchmarks/layers.py
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/serve.py

# Every workload of benchmarks/speed.py in its quick mode, on this CPU and as an AVX2 CPU
# without native bf16, compilation disabled: a check that `make bench` runs on both kinds of
# machine (tests/test_benchmarks_run.py); and the checks that take minutes against tools of
# the field (schemathesis, structured output's hundred completions), marked `bench` too.
bench-check: $(STAMP)
	$(BIN)/python -m pytest -m bench -n auto --dist worksteal

# Hours: every recipe within its budget (see benchmarks/quality.py), then the README table.
results: $(STAMP)
	$(BIN)/python benchmarks/quality.py
	$(BIN)/python benchmarks/results_table.py
