# horovod-rs: `make demo` runs the main job, `make test` runs every test.
# Each target installs what it needs (Gradle, a project-local Python environment with
# pyspark) the first time, and only the first time.

PYSPARK_VERSION := 4.0.4
VENV            := .venv
PYTHON          := $(VENV)/bin/python
SPARK_HOME      := $(abspath $(VENV)/lib/python3.11/site-packages/pyspark)
SPARK_SUBMIT    := $(VENV)/bin/spark-submit
GRADLE          := gradle --console=plain -q
JAR             := build/libs/horovod-rs.jar
EXAMPLES_JAR    := build/libs/horovod-rs-examples.jar
MASTER          := local-cluster[2,1,1024]
SPARK_ARGS      := --master '$(MASTER)' --jars $(JAR) --conf spark.plugins=horovod.rs.spark.HorovodPlugin \
                   --conf spark.ui.enabled=false --driver-java-options '-Dlog4j2.configurationFile=examples/log4j2.properties'

export SPARK_HOME
export PYSPARK_PYTHON := $(abspath $(PYTHON))

# Peer benchmarks (Open MPI, Gloo) live beside the repository.
PEERS           := ../shared/bench/peers/run-peers.sh
BENCH_RANKS     := 2 3 4
# 1: also install torch (PyPI's Linux wheel pulls its CUDA libraries, about
# 5 GiB) into the project environment, so the peers include Gloo.
BENCH_GLOO      ?= 0
# Runs of everything (ours and the peers) in turn; the table and plot show
# each figure's median (on a shared VM, single runs vary by up to 2x).
BENCH_REPEAT    ?= 1

.PHONY: demo demo-run-api scala-example pyspark-test python-test test cargo-test java-test integration-test lint jar jar-release bench-launch bench-collectives bench-ingest bench-python tools clean

# The main job: HorovodEstimator.fit on a generated tabular data set, then transform.
demo: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.TabularDemo $(EXAMPLES_JAR) 200000 2

# The Run API's own demo: data-parallel linear regression written by hand.
demo-run-api: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.LinearRegressionDemo $(EXAMPLES_JAR) 2

test: tools lint cargo-test java-test integration-test scala-example pyspark-test python-test

## Tools ---------------------------------------------------------------------

tools: .tools/gradle.stamp $(VENV)/.pyspark-$(PYSPARK_VERSION)

.tools/gradle.stamp:
	@command -v gradle >/dev/null || { apt-get update -qq && apt-get install -y -qq gradle; }
	@mkdir -p .tools && touch $@

.tools/openmpi.stamp:
	@command -v mpicc >/dev/null || { apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev; }
	@mkdir -p .tools && touch $@

$(VENV)/.matplotlib:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q matplotlib
	touch $@

$(VENV)/.torch:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q torch
	touch $@

$(VENV)/.pyspark-$(PYSPARK_VERSION):
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q pyspark==$(PYSPARK_VERSION)
	touch $@

## Builds --------------------------------------------------------------------

jar:
	cargo build -p horovod-jni
	$(GRADLE) jar examplesJar

jar-release:
	cargo build --release -p horovod-jni
	$(GRADLE) -PnativeProfile=release jar examplesJar

## Tests ---------------------------------------------------------------------

# The NCCL backend (feature `cuda`) is linted too: it builds without CUDA.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p horovod-core --features cuda --all-targets -- -D warnings
	cd native/python && cargo fmt -- --check && cargo clippy --features cuda -- -D warnings

# The NCCL tests of this host: no GPU, so they pin the errors and the setup
# agreement; docs/gpu.md lists what a GPU host must check.
cargo-test:
	cargo test --workspace
	cargo test -p horovod-core --features cuda --lib nccl
	cargo test -p horovod-core --features cuda --test engine_processes gpu

# Gradle stays quiet; the summary lists every test and ends with a pass/fail count.
java-test: jar
	rm -rf build/test-results/test
	$(GRADLE) test --continue || true
	python3 scripts/junit_summary.py build/test-results/test

integration-test: jar
	rm -rf build/test-results/integrationTest
	$(GRADLE) integrationTest -PsparkHome=$(SPARK_HOME) --continue || true
	python3 scripts/junit_summary.py build/test-results/integrationTest

# The Scala user's path: spark-shell with the jar runs a script that fits and
# transforms; the script exits non-zero when the model misses its threshold.
# (Spark 4.0's shell only runs `-i` scripts interactively, so the script is piped;
# the grep fails the target if the script did not get as far as its result line.)
scala-example: jar
	$(VENV)/bin/spark-shell $(SPARK_ARGS) < examples/scala/fit.scala > build/scala-example.log 2>&1 \
	  || { tail -40 build/scala-example.log; exit 1; }
	@grep "scala example:" build/scala-example.log || { tail -40 build/scala-example.log; exit 1; }

# The PySpark user's path: horovod_rs.spark.ml wraps the JVM estimator, and
# horovod_rs.spark.run runs functions in the Python workers (PYSPARK_PYTHON is
# the project environment, where horovod_rs is installed).
pyspark-test: jar $(VENV)/.pytest $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.estimator-extras
	HOROVOD_RS_JAR=$(abspath $(JAR)) $(VENV)/bin/pytest -q -p no:cacheprovider integration-tests/python

# The Torch and Lightning estimators' tests: the extras spark, torch and lightning of
# python/pyproject.toml.
$(VENV)/.estimator-extras: | $(VENV)/.torch
	$(VENV)/bin/pip install -q pyarrow pandas fsspec tensorboard pytorch-lightning
	touch $@

$(VENV)/.pytest:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q pytest numpy
	touch $@

# horovod_rs (python/): the PyO3 binding built by maturin, installed into the
# project environment; rebuilt when its sources change.
PY_SOURCES := $(shell find python native/python/src native/core/src -name '*.py' -o -name '*.rs' 2>/dev/null) \
              python/pyproject.toml native/python/Cargo.toml
$(VENV)/.horovod_rs: $(PY_SOURCES) | $(VENV)/.pyspark-$(PYSPARK_VERSION)
	$(VENV)/bin/pip install -q maturin cloudpickle
	$(VENV)/bin/pip install -q ./python
	touch $@

# Horovod's PyTorch API under the launcher with 2 and 3 processes, the launcher
# itself, a Horovod-style training script (exits 1 below 90% accuracy), and the
# tf.keras API with 2 processes.
python-test: $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.tensorflow $(VENV)/.pytest
	$(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests
	$(VENV)/bin/horovodrs -np 3 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests
	PATH=$(abspath $(VENV))/bin:$$PATH $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_launcher
	$(VENV)/bin/horovodrs -np 2 $(PYTHON) examples/pytorch/train_generated.py --epochs 2 --fp16-allreduce
	TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_keras

$(VENV)/.tensorflow:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q tensorflow-cpu
	touch $@

## Benchmarks ----------------------------------------------------------------

# A Rossmann-shaped MLP (198-1000-1000-1000-500-1) on 2 processes: horovod_rs's
# DistributedOptimizer next to torch DistributedDataParallel over gloo.
# Rounds alternate the two, so that a busy moment on the host hits both.
BENCH_ROUNDS ?= 3
bench-python: $(VENV)/.horovod_rs $(VENV)/.torch
	@echo "impl,procs,batch,steps_per_s"
	@for round in $$(seq $(BENCH_ROUNDS)); do \
	  $(VENV)/bin/horovodrs -np 2 $(PYTHON) python/bench/bench_python.py --impl horovod_rs | sed 's/^\[0\]<stdout>://'; \
	  $(PYTHON) -m torch.distributed.run --nproc_per_node 2 --master_port 29571 python/bench/bench_python.py --impl ddp 2>/dev/null; \
	done

# A Rossmann-like DataFrame (18 categorical + 18 continuous columns) into the
# trainer's tensors on every rank: Arrow straight from the executors versus a
# Parquet round trip, then the Rossmann model's training speed; one CSV.
INGEST_ROWS ?= 1000000
bench-ingest: tools jar-release
	cd native/bench-ingest && cargo build --release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --driver-memory 2g --class horovod.rs.examples.IngestBenchmark $(EXAMPLES_JAR) \
	  $(INGEST_ROWS) 2 native/bench-ingest/target/release/horovod-bench-ingest examples/rossmann/rossmann-model.json \
	  | tee build/bench-ingest.csv

bench-launch: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.LaunchBenchmark $(EXAMPLES_JAR)

# Allreduce (f32 SUM, 4 B to 64 MiB, 2-4 ranks on this host): ours over shared
# memory and over TCP, then the peers, as one CSV on stdout; then a table and
# a plot in docs/bench/.
bench-collectives: .tools/openmpi.stamp $(VENV)/.matplotlib $(if $(filter 1,$(BENCH_GLOO)),$(VENV)/.torch)
	cargo build --release -p horovod-bench
	@mkdir -p build/bench
	bash -o pipefail -c 'for run in $$(seq $(BENCH_REPEAT)); do \
	  ./target/release/horovod-bench $(BENCH_RANKS); \
	  first=1; for n in $(BENCH_RANKS); do \
	    PYTHON=$(abspath $(PYTHON)) bash $(PEERS) $$n | tail -n +2 | \
	      if [ $$first = 1 ]; then cat; else grep -v "^memcpy,"; fi; first=0; \
	  done; done | tee build/bench/collectives.csv'
	$(PYTHON) scripts/bench_collectives.py build/bench/collectives.csv docs/bench

clean:
	cargo clean
	rm -rf build .gradle
