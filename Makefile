# Every target sets itself up: a fresh clone needs only `make tutorial` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
OUT    ?= output

.PHONY: setup models tutorial test lint lab bench speed sidebyside kernels ablation head-levers notebooks gpu-pack gpu-check clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)  ## virtual environment with the pinned packages + helpers

models: setup  ## fetch and convert the offline pocket pair into the cache (the only download of a model)
	$(PY) -m helpers.models

tutorial: export BIG_SMALL_HEADLESS=1
tutorial: models  ## execute every numbered notebook headless (papermill) into $(OUT)/
	$(PY) -m helpers.tutorial --out $(OUT)

test: export BIG_SMALL_HEADLESS=1
test: models  ## unit tests + every notebook under nbval + ruff
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check .

lab: models  ## JupyterLab on the repository
	$(VENV)/bin/jupyter lab --notebook-dir=.

bench: models  ## speed benchmark of every method on the article's raw prompts (see README)
	$(PY) -m helpers.bench --out $(OUT)/bench.json

speed: models  ## the speed protocol: both learned drafters on held-out chat requests, 30 min (Xeon, AMX) to 42-75 min (AVX-512 EPYC VMs) on 2 cores (README)
	$(PY) -m helpers.speed --out $(OUT)/speed.json

sidebyside: models  ## every drafter side by side by the speed protocol (notebook 07, section 5), 27 min on the Xeon with AMX (README)
	$(PY) -m helpers.sidebyside --out $(OUT)/sidebyside.json

kernels: models  ## the roofline of the expert's execution paths (eager, prepacked, bf16, int8), about 12 min (README)
	$(PY) -m helpers.kernels --out $(OUT)/kernels.json

ablation: models  ## the head's lesson isolated: four drafters trained alike, then measured on held-out requests (README)
	$(PY) -m helpers.ablation --out $(OUT)/ablation.json

head-levers: models  ## what moves the head's α: teacher-text format, epochs, data, the training-time test, fused features (README)
	$(PY) -m helpers.head_levers --out $(OUT)/head-levers.json

notebooks: export BIG_SMALL_HEADLESS=1
notebooks: models  ## maintainers: re-execute the committed notebooks in place (MKL's native kernels), strip, stamp
	cd notebooks && for nb in [0-9][0-9]_*.ipynb; do \
		env -u MKL_CBWR ../$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace "$$nb" || exit 1; done
	$(VENV)/bin/nbstripout --keep-output --keep-count notebooks/*.ipynb
	env -u MKL_CBWR $(PY) -m helpers.tutorial --stamp

gpu-pack: models  ## before a lent GPU run: split the pocket GGUF into parts that fit one transfer (helpers/gpu_check.py)
	$(PY) -m helpers.gpu_check pack

gpu-check:  ## on the lent GPU machine (its own python3 with torch): every claim and the speed protocol on CUDA
	PYTHONPATH=build/gpu/python:. BIG_SMALL_CACHE=build/gpu/cache python3 -m helpers.gpu_check run --device cuda

clean:
	rm -rf $(OUT) .pytest_cache
