# horovod-rs: `make demo` runs the main job, `make test` runs every test.
# Each target installs what it needs (Gradle, a project-local Python environment with
# pyspark) the first time, and only the first time.

SHELL           := /bin/bash
PYSPARK_VERSION := 4.3.0
VENV            := .venv
PYTHON          := $(VENV)/bin/python
# Installs into an environment one at a time (`make -j2` may reach two at once), at the versions
# python/constraints.txt pins (CONSTRAINTS= installs the newest instead: make test-newest).
CONSTRAINTS     ?= python/constraints.txt
PIP             = flock $(VENV)/.pip-lock env $(if $(CONSTRAINTS),PIP_CONSTRAINT=$(abspath $(CONSTRAINTS))) $(VENV)/bin/pip
SPARK_HOME      := $(abspath $(VENV)/lib/python3.11/site-packages/pyspark)
SPARK_SUBMIT    := $(VENV)/bin/spark-submit
GRADLE          := gradle --console=plain -q
MASTER          := local-cluster[2,1,1024]

# Spark lines: build.gradle builds a jar per line. The project environment's pyspark is the
# newest 4.x (LINE); Spark 3.5 with Scala 2.12, as Databricks' 15.4 and 16.4 LTS runtimes run it
# (LINE_35), has an environment of its own (VENV_35) that shares the project environment's
# packages. The Spark tests run on both; the Scala 2.13 jar of 3.5, which no pyspark runs, is
# compiled and unit-tested (by make test-matrix and make dist: the same sources and shim as the
# 2.12 jar's, which make test compiles and unit-tests).
LINE            := spark4_2.13
LINE_35         := spark3.5_2.12
LINES           := $(LINE) $(LINE_35) spark3.5_2.13
TESTED_LINES    := $(LINE) $(LINE_35)
PYSPARK_35      := 3.5.9
VENV_35         := .venv-spark3.5
PIP_35          = flock $(VENV_35)/.pip-lock env $(if $(CONSTRAINTS),PIP_CONSTRAINT=$(abspath $(CONSTRAINTS))) $(VENV_35)/bin/pip

# A line's jar; its Gradle (with a task history of its own, so that building one line does not
# make Gradle rebuild another); its Python environment; the Spark its jobs run on.
line_jar        = build/$(1)/libs/horovod-rs-$(1).jar
line_gradle     = $(GRADLE) --project-cache-dir build/$(1)/.gradle -PsparkLine=$(1)
line_venv       = $(if $(filter $(LINE_35),$(1)),$(VENV_35),$(VENV))
line_spark_home = $(abspath $(call line_venv,$(1))/lib/python3.11/site-packages/pyspark)
line_spark_env  = SPARK_HOME=$(call line_spark_home,$(1)) PYSPARK_PYTHON=$(abspath $(call line_venv,$(1)))/bin/python
# The Java a line's classes target (build.gradle's `java`): 8 for Spark 3.5, 17 for Spark 4.
line_java       = $(if $(filter spark3.5%,$(1)),8,17)
spark_args      = --master '$(MASTER)' --jars $(1) --conf spark.plugins=horovod.rs.spark.HorovodPlugin \
                  --conf spark.ui.enabled=false --driver-java-options '-Dlog4j2.configurationFile=examples/log4j2.properties'

JAR             := $(call line_jar,$(LINE))
EXAMPLES_JAR    := build/$(LINE)/libs/horovod-rs-examples.jar
SPARK_ARGS      := $(call spark_args,$(JAR))

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

.PHONY: demo demo-run-api scala-example pyspark-test pyspark-slow-test python-test test lane-installs lane-builds cargo-test cargo-test-build cargo-test-cuda java-test integration-test lint jar jars \
        jar-release native-debug dist dist-native dist-jars dist-wheels dist-check dist-smoke bench-launch bench-launch-python bench-collectives bench-ingest bench-python bench-grouped bench-lockstep bench-estimator bench-trainer tools spark-envs clean \
        pyspark-connect-test $(addprefix jar-,$(LINES)) $(addprefix java-test-,$(LINES)) \
        $(addprefix integration-test-,$(TESTED_LINES)) $(addprefix scala-example-,$(TESTED_LINES)) \
        $(addprefix pyspark-test-,$(TESTED_LINES)) $(addprefix pyspark-connect-test-,$(TESTED_LINES))

# The main job: HorovodEstimator.fit on a generated tabular data set, then transform.
demo: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.TabularDemo $(EXAMPLES_JAR) 200000 2

# The Run API's own demo: data-parallel linear regression written by hand.
demo-run-api: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.LinearRegressionDemo $(EXAMPLES_JAR) 2

# `make test` installs and builds first, in two lanes at once (downloads overlap compiles; the
# lanes' lines carry their names), then runs every suite, one after another: suites side by side
# were slower than in turn on 2 cores (each starts a Spark cluster and Python workers that import
# TensorFlow or torch).
LANE_installs := $(VENV)/.pyspark-$(PYSPARK_VERSION) $(VENV_35)/.pyspark-$(PYSPARK_35) $(VENV)/.pytest $(VENV)/.torch $(VENV)/.tensorflow $(VENV)/.estimator-extras \
                 $(VENV)/.connect $(VENV)/.horovod_rs $(VENV)/.mlflow $(VENV)/.vermin $(VENV)/.dist-tools
# The jars before the test binaries: Gradle's compile (18 s of it a line's first classpath snapshot)
# keeps one core busy, so it goes beside the installs' downloads rather than alone at the end.
LANE_builds   := .tools/gradle.stamp lint $(addprefix jar-,$(TESTED_LINES)) cargo-test-build
TESTS := cargo-test $(addprefix java-test-,$(TESTED_LINES)) dist-smoke integration-test-$(LINE) pyspark-test pyspark-connect-test-$(LINE) elastic-test \
         python-test faults-quick
# Each suite's time is printed after it (`make test: <suite> <seconds> s`), to see where CI's goes.
test:
	@start=$$SECONDS; $(MAKE) --no-print-directory -j2 lane-installs lane-builds && \
	  echo "make test: installs and builds $$((SECONDS - start)) s"
	@for suite in $(TESTS); do start=$$SECONDS; $(MAKE) --no-print-directory $$suite || exit 1; \
	  echo "make test: $$suite $$((SECONDS - start)) s"; done

lane-installs lane-builds: lane-%:
	set -o pipefail; $(MAKE) --no-print-directory -j1 $(LANE_$*) 2>&1 | sed -u 's/^/[$*] /'

# What make test leaves out for CI's time, each a line or a size that make test covers on another:
# the NCCL backend's tests of this host (make test compiles them), the unit tests of Spark 3.5's
# Scala 2.13 jar, Spark 3.5's JVM integration tests and Connect run, the Scala script on both
# lines (spark-shell with the jar; the newest line's estimator is fitted from the JVM by its
# integration tests),
# the slow PySpark examples, Horovod's PyTorch API with 2 processes, the TensorFlow API on Keras 2
# and with 3 processes, and the Rossmann
# Flyte workflow (a Spark application of its own, about 3 minutes; the KerasEstimator it fits,
# with Rossmann's custom objects and BestModelCheckpoint, is the PySpark tests').
.PHONY: test-matrix
test-matrix:
	$(MAKE) --no-print-directory cargo-test-cuda java-test-spark3.5_2.13 integration-test-$(LINE_35) scala-example pyspark-connect-test-$(LINE_35) pyspark-slow-test \
	  flyte-test
	$(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests
	TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_tensorflow
	TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 3 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_tensorflow

## Tools ---------------------------------------------------------------------

tools: .tools/gradle.stamp $(VENV)/.pyspark-$(PYSPARK_VERSION)

# What the Spark tests of every tested line need.
spark-envs: tools $(VENV_35)/.pyspark-$(PYSPARK_35)

.tools/gradle.stamp:
	@command -v gradle >/dev/null || { apt-get update -qq && apt-get install -y -qq gradle; }
	@mkdir -p .tools && touch $@

.tools/openmpi.stamp:
	@command -v mpicc >/dev/null || { apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev; }
	@mkdir -p .tools && touch $@

$(VENV)/.matplotlib: | $(PYTHON)
	$(PIP) install -q matplotlib
	touch $@

$(VENV)/.torch: | $(PYTHON)
	$(PIP) install -q torch
	touch $@

$(PYTHON):
	python3 -m venv $(VENV)

$(VENV)/.pyspark-$(PYSPARK_VERSION): | $(PYTHON)
	$(PIP) install -q pyspark==$(PYSPARK_VERSION)
	touch $@

# Spark 3.5's pyspark, in an environment whose other packages (horovod_rs, torch, tensorflow,
# pytest, ...) are the project environment's, not installed twice: a .pth file appends that
# environment's site-packages to sys.path, after this one's own (so pyspark and py4j are 3.5's).
$(VENV_35)/.pyspark-$(PYSPARK_35): | $(VENV)/.pyspark-$(PYSPARK_VERSION)
	test -x $(VENV_35)/bin/python || python3 -m venv $(VENV_35)
	$(PIP_35) install -q pyspark==$(PYSPARK_35)
	echo "import site; site.addsitedir('$(abspath $(VENV))/lib/python3.11/site-packages')" \
	  > $(VENV_35)/lib/python3.11/site-packages/project-environment.pth
	touch $@

## Builds --------------------------------------------------------------------

# Debug builds for the tests: `make jar` builds the 4.x line's jar, `make jars` every line's
# (build/<line>/libs/horovod-rs-<line>.jar). Release builds for the demo and the benchmarks.
jar: jar-$(LINE)
jars: $(addprefix jar-,$(LINES))

$(addprefix jar-,$(LINES)): jar-%: native-debug
	$(call line_gradle,$*) jar

native-debug:
	cargo build -p horovod-jni

jar-release:
	cargo build --release -p horovod-jni
	$(call line_gradle,$(LINE)) -PnativeProfile=release jar examplesJar

## Tests ---------------------------------------------------------------------

# The NCCL backend (feature `cuda`) is linted too: it builds without CUDA.
lint:
	python3 scripts/module_graph.py --check native/core/src
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p horovod-core --features cuda --all-targets -- -D warnings
	cd native/python && cargo fmt -- --check && CARGO_TARGET_DIR=$(abspath target) cargo clippy --features cuda -- -D warnings

cargo-test:
	cargo test --workspace

# The test binaries of cargo-test, built (make test builds before it tests).
cargo-test-build:
	cargo test --workspace --no-run

# The NCCL tests of this host: no GPU, so they pin the errors and the setup agreement; docs/gpu.md
# lists what a GPU host must check. make test-matrix runs them (their build with the `cuda`
# feature took 1.5 minutes of CI's); make test compiles the backend and its tests (make lint).
cargo-test-cuda:
	cargo test -p horovod-core --features cuda --lib nccl
	cargo test -p horovod-core --features cuda --test engine_processes gpu

# Gradle stays quiet; the summary lists every test and ends with a pass/fail count.
# The unit tests run on every line (Spark's jars from Maven Central); then the line's jar is
# checked to hold no class newer than the line's Java (under a second).
java-test: $(addprefix java-test-,$(LINES))
$(addprefix java-test-,$(LINES)): java-test-%: native-debug
	rm -rf build/$*/test-results/test
	$(call line_gradle,$*) test jar --continue || true
	python3 scripts/junit_summary.py build/$*/test-results/test
	python3 scripts/check_classfiles.py --java $(call line_java,$*) $(call line_jar,$*)

# The JVM integration tests of each tested line on its pyspark's Spark: all of them on the newest
# line; on Spark 3.5 the Run API's (its native estimator is fitted there from PySpark,
# test_estimator.py; IT_TESTS_35= runs them all). make test runs the newest line's (CI's time is
# short; the 3.5 jar's barrier stages, native library and estimator run in pyspark-test's 3.5 run).
IT_TESTS_35 ?= horovod.rs.spark.HorovodRunnerIT
integration-test: $(addprefix integration-test-,$(TESTED_LINES))
$(addprefix integration-test-,$(TESTED_LINES)): integration-test-%: spark-envs native-debug
	rm -rf build/$*/test-results/integrationTest
	$(call line_gradle,$*) integrationTest -PsparkHome=$(call line_spark_home,$*) --continue \
	  $(if $(and $(filter $(LINE_35),$*),$(IT_TESTS_35)),--tests '$(IT_TESTS_35)') || true
	python3 scripts/junit_summary.py build/$*/test-results/integrationTest

# The Scala user's path: spark-shell with the jar runs a script that fits and
# transforms; the script exits non-zero when the model misses its threshold.
# (Spark 4's shell only runs `-i` scripts interactively, so the script is piped;
# the grep fails the target if the script did not get as far as its result line.)
# make test-matrix runs both (make test fits the newest line's estimator from the JVM in its
# integration tests).
scala-example: $(addprefix scala-example-,$(TESTED_LINES))
$(addprefix scala-example-,$(TESTED_LINES)): scala-example-%: spark-envs jar-%
	$(call line_spark_env,$*) $(call line_venv,$*)/bin/spark-shell $(call spark_args,$(call line_jar,$*)) \
	  < examples/scala/fit.scala > build/$*/scala-example.log 2>&1 || { tail -40 build/$*/scala-example.log; exit 1; }
	@grep "scala example:" build/$*/scala-example.log || { tail -40 build/$*/scala-example.log; exit 1; }

# The PySpark user's path: horovod_rs.spark.ml wraps the JVM estimator, and
# horovod_rs.spark.run runs functions in the Python workers (PYSPARK_PYTHON is
# the line's environment, where horovod_rs is installed or shared).
# The Python estimators (KerasEstimator, ...) train in the same Python workers.
pyspark-test: $(addprefix pyspark-test-,$(TESTED_LINES))
$(addprefix pyspark-test-,$(TESTED_LINES)): pyspark-test-%: spark-envs jar-% $(VENV)/.pytest $(VENV)/.horovod_rs \
                                                         $(VENV)/.torch $(VENV)/.tensorflow $(VENV)/.estimator-extras \
                                                         $(VENV)/.mlflow
	$(call line_spark_env,$*) HOROVOD_RS_JAR=$(abspath $(call line_jar,$*)) TF_CPP_MIN_LOG_LEVEL=3 \
	  $(call line_venv,$*)/bin/python -m pytest -q -p no:cacheprovider --durations=10 --basetemp=build/$*/pytest \
	  -m "$(PYSPARK_MARKS)" $(call pyspark_tests,$*)
PYSPARK_MARKS ?= not slow

# The example scripts left out of make test for its time (tests marked `slow`: each script is a
# Spark application of its own, a minute or more): our Torch and Lightning MNIST examples and the
# Horovod-style Keras MNIST script, on the newest line; the Torch and Lightning fits that shrink
# after a killed executor and grow back (make test runs the Keras one: the families share the
# driver's path) and the Run API's next attempt (make faults kills executors under the same jobs;
# the JVM estimator's is its integration tests'); the TensorFlow data service's compute job on
# Spark (make test runs its ranks' part under horovodrs, python/tests_tensorflow).
pyspark-slow-test:
	$(MAKE) --no-print-directory pyspark-test-$(LINE) PYSPARK_MARKS=slow

# The same tests from a Spark Connect client: the suite starts one Connect server (the driver of
# the same local-cluster, with the jar) and talks to it as Spark 4 clients, Databricks standard
# access mode and Databricks Connect do (integration-tests/python/connect_server.py). Spark 3.5's
# pyspark carries no server: it comes from Maven Central (--packages). make test runs the newest
# line's; `make pyspark-connect-test` runs 3.5's too (left out of make test for CI's time: its
# client code is the newest line's, and its driver path on 3.5 is the classic 3.5 run's).
# horovod_rs.spark.run_elastic on a cluster of its own (three executors, one of which a test
# kills), on the newest line.
elastic-test: spark-envs jar-$(LINE) $(VENV)/.pytest $(VENV)/.horovod_rs $(VENV)/.torch
	$(call line_spark_env,$(LINE)) HOROVOD_RS_JAR=$(abspath $(call line_jar,$(LINE))) \
	  $(PYTHON) -m pytest -q -p no:cacheprovider --durations=5 --basetemp=build/$(LINE)/pytest-elastic integration-tests/elastic

# Two hosts on one machine, twice, each time on a standalone cluster of its own, on the newest
# line: named by HOROVOD_HOSTNAME in each worker's environment, then apart as Spark sees them (each
# worker in a network namespace, as root). Run by make faults: a cluster's start takes 20 s or more.
hosts-test: spark-envs $(VENV)/.pytest $(VENV)/.horovod_rs
	$(call line_spark_env,$(LINE)) $(PYTHON) -m pytest -q -p no:cacheprovider --durations=3 \
	  --basetemp=build/$(LINE)/pytest-hosts integration-tests/hosts

pyspark-connect-test: $(addprefix pyspark-connect-test-,$(TESTED_LINES))
$(addprefix pyspark-connect-test-,$(TESTED_LINES)): pyspark-connect-test-%: spark-envs jar-% $(VENV)/.pytest \
    $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.tensorflow $(VENV)/.estimator-extras $(VENV)/.connect $(VENV)/.mlflow
	$(call line_spark_env,$*) HOROVOD_RS_JAR=$(abspath $(call line_jar,$*)) TF_CPP_MIN_LOG_LEVEL=3 HOROVOD_RS_TEST_CONNECT=1 \
	  $(if $(filter $(LINE_35),$*),HOROVOD_RS_CONNECT_SERVER_VERSION=$(CONNECT_SERVER_35)) \
	  $(call line_venv,$*)/bin/python -m pytest -q -p no:cacheprovider --durations=10 --basetemp=build/$*/pytest-connect \
	  $(call pyspark_connect_tests,$*)

# Every PySpark test runs on the newest line; on Spark 3.5 (CI's time is short) what depends on
# the Spark version: the Run API's results and errors, the native estimator's wrapper, the jars,
# and a Python estimator's fit, transform and persistence in a Pipeline (the Torch family's: the
# families share their driver's Spark calls, data path and Spark ML persistence, and the Run API's
# tests have imported torch in the workers already, where TensorFlow's import would add 20 s).
PYSPARK_TESTS_35 = $(CONNECT_RUN_TESTS_35) test_estimator.py test_jars.py \
                    test_torch_estimator.py::test_two_inputs_two_outputs_weights_validation_column_and_persistence
pyspark_tests = $(if $(filter $(LINE_35),$(1)),$(addprefix integration-tests/python/,$(PYSPARK_TESTS_35)),integration-tests/python)
# Spark 3.5's Connect server: the newest spark-connect_2.12 Maven Central serves here (the line's
# patch releases speak the same protocol).
CONNECT_SERVER_35 := 3.5.7
# From a Connect client, what depends on the driver path (classic runs cover the rest, which the
# ranks do the same way under both, as in the Run API's stress test): on the newest line the Run
# API and run_elastic, cancelling, the JVM estimator over Spark ML on Connect, the Keras family's fit, transform,
# persistence, Pipeline and errors (a rank's failure among them), and the Torch family's
# persistence (the one driver path of every family: its store check, CrossValidator, prepared
# data and Lightning from a Connect client are make pyspark-connect-test-full's); on 3.5 the Run
# API's results and errors, the JVM estimator's clear refusal, and a Python estimator's fit,
# transform and persistence (Spark 3.5's Connect client has no JVM ML stages, which the other
# tests use to build vectors; cancelling and errors take the same calls as on the newest line).
CONNECT_RUN_TESTS_35 := $(addprefix test_run.py::,test_results_come_back_in_rank_order \
                    test_a_failing_fn_fails_the_job_with_its_traceback \
                    test_more_processes_than_slots_fail_within_the_start_timeout)
CONNECT_RUN_TESTS := $(CONNECT_RUN_TESTS_35) $(addprefix test_run.py::, \
                    test_the_drivers_horovod_variables_reach_the_ranks_and_env_overrides_them \
                    test_init_after_a_peer_returned_keeps_the_jobs_world \
                    test_init_after_a_peer_failed_names_it_instead_of_starting_a_job_of_one \
                    test_run_elastic_returns_results_in_rank_order_and_its_ranks_output \
                    test_run_elastic_names_a_failing_rank)
PYSPARK_CONNECT_TESTS := $(CONNECT_RUN_TESTS) test_cancel.py test_estimator.py \
                    test_keras_estimator.py::test_fit_predicts_and_reports_horovods_history \
                    test_keras_estimator.py::test_save_load_and_pipeline \
                    test_keras_estimator.py::test_bad_columns_and_models_are_named_before_any_job \
                    test_keras_estimator.py::test_nulls_and_a_failing_rank_end_in_one_error_naming_the_rank \
                    test_torch_estimator.py::test_estimator_saves_and_loads
PYSPARK_CONNECT_TESTS_35 := $(CONNECT_RUN_TESTS_35) test_estimator.py \
                    test_keras_estimator.py::test_fit_predicts_and_reports_horovods_history \
                    test_keras_estimator.py::test_estimators_save_and_load
pyspark_connect_tests = $(addprefix integration-tests/python/,$(if $(filter $(LINE_35),$(1)),$(PYSPARK_CONNECT_TESTS_35),$(PYSPARK_CONNECT_TESTS)))

# Every PySpark test that can run from a Connect client, on the newest line (not in make test).
pyspark-connect-test-full:
	$(MAKE) --no-print-directory pyspark-connect-test-$(LINE) PYSPARK_CONNECT_TESTS=.

# Spark Connect's Python client (pyspark's `connect` extra), at the versions tested.
$(VENV)/.connect: | $(VENV)/.pyspark-$(PYSPARK_VERSION)
	$(PIP) install -q grpcio==1.85.3 grpcio-status==1.85.3 googleapis-common-protos==1.76.0 zstandard==0.25.0
	touch $@

# The Lightning estimator's tests need Lightning (the `lightning` extra of python/pyproject.toml).
$(VENV)/.estimator-extras: | $(VENV)/.torch
	$(PIP) install -q pytorch-lightning
	touch $@

# MLflow's client (mlflow-skinny: no server): the Python estimators log to MLflow when it is installed.
# It logs the Keras and PyTorch flavors' models; it needs cachetools < 8 and importlib_metadata < 10.
$(VENV)/.mlflow: | $(PYTHON)
	$(PIP) install -q mlflow-skinny
	touch $@

# pyarrow, pandas and fsspec: what the Python estimators need besides pyspark (the `spark` extra).
$(VENV)/.pytest: | $(PYTHON)
	$(PIP) install -q pytest numpy pyarrow pandas fsspec
	touch $@

# horovod_rs (python/): the PyO3 binding built by maturin, installed into the
# project environment; rebuilt when its sources change.
PY_SOURCES := $(shell find python native/python/src native/core/src -name '*.py' -o -name '*.rs' 2>/dev/null) \
              python/pyproject.toml native/python/Cargo.toml
$(VENV)/.horovod_rs: $(PY_SOURCES) | $(VENV)/.pyspark-$(PYSPARK_VERSION)
	$(PIP) install -q maturin cloudpickle
	$(PIP) install -q ./python
	touch $@

# vermin: horovod_rs's Python sources need nothing newer than Python 3.10 (its oldest wheel's);
# then the Spark side's unit tests (and horovod_rs's refusal of an older Python);
# Horovod's PyTorch API under the launcher with 3 processes (an odd world; the Spark suites' jobs
# run 2 ranks, and make test-matrix runs this one with 2 too), the launcher
# itself, a Horovod-style training script (exits 1 below 90% accuracy), the tf.keras API with 2
# processes on Keras 3 and on Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1), and the TensorFlow API
# with 2 (on Keras 2 and with 3 processes: make test-matrix).
python-test: $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.tensorflow $(VENV)/.pytest $(VENV)/.vermin
	$(VENV)/bin/vermin --target=3.10- --no-tips --violations python/horovod_rs
	$(VENV)/bin/pytest -q -p no:cacheprovider python/tests_spark
	$(VENV)/bin/horovodrs -np 3 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests
	PATH=$(abspath $(VENV))/bin:$$PATH $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_launcher
	$(VENV)/bin/horovodrs -np 2 $(PYTHON) examples/pytorch/train_generated.py --epochs 2 --fp16-allreduce
	TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_keras
	TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_keras
	TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 2 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests_tensorflow

$(VENV)/.vermin: | $(PYTHON)
	$(PIP) install -q vermin
	touch $@

# tensorboard: the estimators write TensorBoard logs to the store when it is installed.
# tf_keras: Keras 2, which most Horovod scripts were written for.
$(VENV)/.tensorflow: | $(PYTHON)
	$(PIP) install -q tensorflow-cpu tensorboard tf_keras
	touch $@

## Distribution --------------------------------------------------------------

# `make dist` writes build/dist/: maven/, a Maven repository of every line's jar with its sources
# jar and POM (for spark-submit --packages), and horovod_rs wheels (manylinux2014) for x86_64 and
# aarch64 that carry the jars: an abi3 wheel for CPython 3.11 and later, and a cp310 wheel for
# CPython 3.10 (no stable-ABI buffer protocol before 3.11), which maturin --zig builds from the
# interpreter data it carries, without a Python 3.10 here. zig links the native code for glibc 2.17
# (cargo-zigbuild, maturin --zig). rustup's rustc compiles for x86_64, Debian's for aarch64, as
# only Debian's packages bring an aarch64 standard library here (scripts/debian_rustc.sh).
# `make dist DIST_ARCHS=x86_64` leaves aarch64 out. Then dist-check tries what it built.
# make test builds none of this: it runs dist-smoke (below), which checks its parts in seconds.
DIST            := build/dist
DIST_ARCHS      := x86_64 aarch64
DIST_RUSTC      := .tools/rust-debian/rustc
DIST_TEST       := build/dist-test
VERSION         := $(shell sed -n 's/^version = "\(.*\)"/\1/p' python/pyproject.toml)
# cargo-zigbuild and maturin find zig (PyPI's ziglang) through the project environment's python;
# $(1) is the architecture. Debian's compiler keeps a target directory of its own.
dist_env         = PATH=$(abspath $(VENV))/bin:$$PATH \
                   $(if $(filter aarch64,$(1)),RUSTC=$(abspath $(DIST_RUSTC)) CARGO_TARGET_DIR=$(abspath target/debian-rustc))
dist_target_dir  = $(if $(filter aarch64,$(1)),target/debian-rustc,target)
comma           := ,
empty           :=
DIST_PLATFORMS  := $(subst $(empty) $(empty),$(comma),$(addprefix linux-,$(DIST_ARCHS)))
# The wheels of each architecture, by tag: the abi3 one (the binding's default features) and one
# for CPython 3.10's own ABI.
WHEEL_TAGS      := cp311-abi3 cp310-cp310
wheel_args       = $(if $(filter cp310-cp310,$(1)),--no-default-features -i python3.10)

dist: dist-jars dist-wheels dist-check

$(VENV)/.dist-tools: | $(PYTHON)
	$(PIP) install -q ziglang cargo-zigbuild maturin
	touch $@

$(DIST_RUSTC):
	bash scripts/debian_rustc.sh $(dir $(DIST_RUSTC))

# The JNI library of each platform, laid out as the jars carry it: build/dist-native/linux-<arch>/.
dist-native: $(VENV)/.dist-tools $(if $(filter aarch64,$(DIST_ARCHS)),$(DIST_RUSTC))
	rm -rf build/dist-native
	$(foreach arch,$(DIST_ARCHS),$(call dist_env,$(arch)) cargo zigbuild --release -p horovod-jni \
	  --target $(arch)-unknown-linux-gnu.2.17 && mkdir -p build/dist-native/linux-$(arch) && \
	  cp $(call dist_target_dir,$(arch))/$(arch)-unknown-linux-gnu/release/libhorovod_rs_jni.so \
	    build/dist-native/linux-$(arch)/ &&) true

# Each line's release jar builds in build/release/<line>/, apart from the tests' debug jars.
dist-jars: tools dist-native
	rm -rf $(DIST)/maven
	for line in $(LINES); do \
	  $(GRADLE) --project-cache-dir build/release/$$line/.gradle -PsparkLine=$$line \
	    -PnativeDir=$(abspath build/dist-native) -PmavenDir=$(abspath $(DIST)/maven) mavenRepo || exit 1; \
	done

# Every line's jar goes into the wheels (horovod_rs/jars/, there only while maturin packs them);
# the `cuda` feature loads CUDA and NCCL at run time only, so the wheels work with and without GPUs.
dist-wheels: dist-jars $(VENV)/.dist-tools
	rm -rf python/horovod_rs/jars $(DIST)/*.whl && mkdir -p python/horovod_rs/jars
	cp $(foreach line,$(LINES),$(DIST)/maven/horovod/rs/horovod-rs-$(line)/$(VERSION)/horovod-rs-$(line)-$(VERSION).jar) \
	  python/horovod_rs/jars/
	cd python && $(foreach arch,$(DIST_ARCHS),$(foreach tag,$(WHEEL_TAGS),$(call dist_env,$(arch)) maturin build --release \
	  --zig --compatibility manylinux2014 --features cuda $(call wheel_args,$(tag)) --target $(arch)-unknown-linux-gnu \
	  --out $(abspath $(DIST)) &&)) true; \
	  built=$$?; rm -rf horovod_rs/jars; exit $$built

# The artifacts as users get them: readelf finds no glibc symbol newer than 2.17 in any library;
# each architecture has an abi3 and a cp310 wheel, each with the extension module its tag names;
# no jar holds a class newer than its line's Java (8 for Spark 3.5: no JDK 8 runs them here);
# fresh environments (no Rust on PATH) install the x86_64 wheel with each tested pyspark and run
# horovod_rs.spark.run and the estimator; spark-submit --packages takes the 4.x jar from the
# Maven repository. `make dist` runs it on every build; it is not part of `make test`, whose
# debug builds it would have to replace with release builds for two platforms.
dist-check:
	python3 scripts/check_native.py --glibc 2.17 --platforms $(DIST_PLATFORMS) \
	  --wheel-tags $(subst $(space),$(comma),$(WHEEL_TAGS)) $(DIST)
	$(foreach line,$(LINES),python3 scripts/check_classfiles.py --java $(call line_java,$(line)) \
	  $(DIST)/maven/horovod/rs/horovod-rs-$(line)/$(VERSION)/horovod-rs-$(line)-$(VERSION).jar &&) true
	rm -rf $(DIST_TEST)
	for pyspark in $(PYSPARK_VERSION) $(PYSPARK_35); do \
	  python3 -m venv $(DIST_TEST)/pyspark-$$pyspark && \
	  env -u SPARK_HOME PATH=/usr/bin:/bin $(DIST_TEST)/pyspark-$$pyspark/bin/pip install -q \
	    "$$(echo $(DIST)/horovod_rs-$(VERSION)-cp311-abi3-*_x86_64.whl)[spark]" pyspark==$$pyspark numpy && \
	  env -u SPARK_HOME PYSPARK_PYTHON=$(abspath $(DIST_TEST))/pyspark-$$pyspark/bin/python \
	    $(DIST_TEST)/pyspark-$$pyspark/bin/python integration-tests/dist/check_install.py wheel || exit 1; \
	done
	env -u SPARK_HOME PYSPARK_PYTHON=$(abspath $(DIST_TEST))/pyspark-$(PYSPARK_VERSION)/bin/python \
	  $(DIST_TEST)/pyspark-$(PYSPARK_VERSION)/bin/spark-submit --master '$(MASTER)' \
	  --packages horovod.rs:horovod-rs-$(LINE):$(VERSION) --repositories file://$(abspath $(DIST)/maven) \
	  --conf spark.jars.ivy=$(abspath $(DIST_TEST))/ivy --conf spark.plugins=horovod.rs.spark.HorovodPlugin \
	  --conf spark.ui.enabled=false integration-tests/dist/check_install.py packages

# In make test, what can break `make dist` without building its artifacts: the dist tools answer;
# apt has the Debian rustc scripts/debian_rustc.sh unpacks (--check: nothing downloaded); the
# newest line's mavenRepo packs the debug library laid out as dist-native lays it out into a
# Maven repository under build/dist-smoke (jar, sources jar, POM, checksums; check_native.py
# finds the library and platforms.txt, the glibc limit being this host's own); maturin packs
# python/ as an sdist of the version dist names its files with.
DIST_SMOKE      := build/dist-smoke
DIST_SMOKE_REPO  = $(DIST_SMOKE)/maven/horovod/rs/horovod-rs-$(LINE)/$(VERSION)
dist-smoke: native-debug $(VENV)/.dist-tools
	rm -rf $(DIST_SMOKE) && mkdir -p $(DIST_SMOKE)/native/linux-$(shell uname -m)
	$(VENV)/bin/maturin --version && $(VENV)/bin/cargo-zigbuild --version && $(PYTHON) -m ziglang version
	bash scripts/debian_rustc.sh --check $(dir $(DIST_RUSTC))
	cp target/debug/libhorovod_rs_jni.so $(DIST_SMOKE)/native/linux-$(shell uname -m)/
	$(GRADLE) --project-cache-dir build/release/$(LINE)/.gradle -PsparkLine=$(LINE) \
	  -PnativeDir=$(abspath $(DIST_SMOKE)/native) -PmavenDir=$(abspath $(DIST_SMOKE)/maven) mavenRepo
	cd $(DIST_SMOKE_REPO) && for file in horovod-rs-$(LINE)-$(VERSION){.jar,-sources.jar,.pom}; do \
	  test "$$(sha1sum < $$file | cut -c1-40)" = "$$(cat $$file.sha1)" || { echo "dist-smoke: $$file or its .sha1 is wrong"; exit 1; }; \
	done
	grep -q "<artifactId>horovod-rs-$(LINE)</artifactId>" $(DIST_SMOKE_REPO)/horovod-rs-$(LINE)-$(VERSION).pom
	python3 scripts/check_native.py --glibc $(lastword $(shell getconf GNU_LIBC_VERSION)) \
	  --platforms linux-$(shell uname -m) $(DIST_SMOKE)/maven
	cd python && $(abspath $(VENV))/bin/maturin sdist --out $(abspath $(DIST_SMOKE))
	tar -xzOf $(DIST_SMOKE)/horovod_rs-$(VERSION).tar.gz horovod_rs-$(VERSION)/PKG-INFO | grep -x "Version: $(VERSION)"

## Rossmann --------------------------------------------------------------------

.PHONY: rossmann rossmann-torch flyte-test

# Horovod's Rossmann tutorial on horovod_rs (examples/rossmann, docs/rossmann.md): data
# preparation, KerasEstimator with the tutorial's model, transform and a submission file, on
# generated files with Kaggle's schemas; fails unless the RMSPE on the held-out 2014 rows is
# below ROSSMANN_MAX_RMSPE. ROSSMANN_DATA=dir runs it on the real Kaggle files instead.
ROSSMANN_STORES    ?= 60
ROSSMANN_EPOCHS    ?= 5
ROSSMANN_MAX_RMSPE ?= 0.2
ROSSMANN_ARGS      = --master '$(MASTER)' --num-proc 2 --stores $(ROSSMANN_STORES) --epochs $(ROSSMANN_EPOCHS) \
                     --batch-size 256 --learning_rate 0.001 --work-dir $(abspath build/rossmann) \
                     --max-val-rmspe $(ROSSMANN_MAX_RMSPE) $(if $(ROSSMANN_DATA),--data-dir $(abspath $(ROSSMANN_DATA)))
rossmann: $(VENV)/.horovod_rs $(VENV)/.tensorflow $(VENV)/.pytest
	@mkdir -p build/rossmann
	cd build/rossmann && $(abspath $(PYTHON)) ../../examples/rossmann/keras_spark_rossmann.py $(ROSSMANN_ARGS)

# The same with horovod_rs.spark.torch.TorchEstimator.
rossmann-torch: $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.pytest
	@mkdir -p build/rossmann
	cd build/rossmann && $(abspath $(PYTHON)) ../../examples/rossmann/torch_spark_rossmann.py $(ROSSMANN_ARGS)

# The Rossmann pipeline as a Flyte workflow, run by Flyte's local execution (`pyflyte run`) on 8
# generated stores: the task fails unless every test row has a finite prediction in the submission
# and the model beats predicting each store's median sales (RMSPE 0.23 on these stores): the
# workflow's default 5 epochs (0.09-0.15 seen; 4 epochs gave 0.10-0.14 and once 0.21, over the bound).
FLYTE_ARGS := --stores 8 --epochs 5 --max_val_rmspe 0.2
flyte-test: $(VENV)/.horovod_rs $(VENV)/.tensorflow $(VENV)/.pytest $(VENV)/.flyte
	@mkdir -p build/flyte
	cd build/flyte && TF_CPP_MIN_LOG_LEVEL=3 $(abspath $(VENV))/bin/pyflyte run ../../examples/rossmann/flyte_rossmann.py \
	  rossmann $(FLYTE_ARGS) > flyte.log 2>&1 || { tail -40 flyte.log; exit 1; }
	@grep "rossmann flyte:" build/flyte/flyte.log

# Flyte's SDK and its Spark plugin (their dependencies agree with the project's environment).
$(VENV)/.flyte: | $(PYTHON)
	$(PIP) install -q flytekit==1.16.31 flytekitplugins-spark==1.16.31
	touch $@

# The PySpark and Python suites on the newest release of every package (no constraints), in an
# environment of its own: what upgrading python/constraints.txt would change. Not in make test.
test-newest:
	$(MAKE) --no-print-directory VENV=.venv-newest CONSTRAINTS= pyspark-test-$(LINE) python-test

## Faults ----------------------------------------------------------------------

.PHONY: faults faults-quick bench-recovery elastic-test hosts-test test-newest pyspark-connect-test-full

# The fault suite (scripts/faults.py, docs/reliability.md): FAULT_TRIALS trials of each kind of
# fault on 2-rank jobs (a rank killed, frozen, silent; mismatched tensors; strangers on the
# rendezvous port; a Spark driver or executor killed), one table: finished, clean error,
# unexpected, hangs, crashes, leaks. A Spark kind fits a KerasEstimator: it needs TensorFlow,
# pyarrow, pandas and fsspec.
FAULT_TRIALS ?= 20
FAULT_DEPS := $(VENV)/.horovod_rs $(VENV)/.pytest $(VENV)/.tensorflow $(VENV)/.torch
faults: $(FAULT_DEPS)
	$(PYTHON) scripts/faults.py --trials $(FAULT_TRIALS) --check
	$(MAKE) --no-print-directory hosts-test

# In make test: one trial of each kind of the engine's faults, none of Spark's (a Spark trial
# starts a cluster of its own, 40 s or more each: make faults runs them; an executor killed under
# the Run API and under a fit is integration-tests/python/test_recovery.py's, under an elastic job
# integration-tests/elastic's).
faults-quick: $(FAULT_DEPS)
	$(PYTHON) scripts/faults.py --trials 1 --check --skip $(subst $(space),$(comma),$(FAULTS_QUICK_SKIP))
FAULTS_QUICK_SKIP := spark-driver-killed spark-executor-killed spark-executor-killed-mid-checkpoint \
                     spark-elastic-executor-killed spark-elastic-killed-in-commit spark-elastic-grow \
                     spark-elastic-worker-lost spark-elastic-in-cluster spark-fit-worker-lost spark-fit-grow
comma := ,
space := $(subst ,, )

# Recovery time from a lost executor: an elastic job's vs a relaunch from checkpoint
# (scripts/bench_recovery.py, docs/reliability.md).
bench-recovery: $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.pytest
	$(PYTHON) scripts/bench_recovery.py --runs $(RECOVERY_RUNS)
RECOVERY_RUNS ?= 3

## Benchmarks ----------------------------------------------------------------

# A Rossmann-shaped MLP (198-1000-1000-1000-500-1) and Horovod's MNIST net on 2 processes:
# horovod_rs's DistributedOptimizer next to torch DistributedDataParallel over gloo, to the same
# steps in lockstep exchanging no gradient (sync; pipe: meeting through named pipes, without the
# engine) and with no communication (none); then the same models in Keras, with horovod_rs's Keras
# DistributedOptimizer, in lockstep both ways and alone. Rounds
# alternate them, so that a busy moment on the host hits each.
BENCH_ROUNDS ?= 3
bench-python: $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.tensorflow
	@echo "impl,procs,batch,steps_per_s,model"
	@for round in $$(seq $(BENCH_ROUNDS)); do for model in mlp mnist; do \
	  $(VENV)/bin/horovodrs -np 2 $(PYTHON) python/bench/bench_python.py --impl horovod_rs --model $$model | sed 's/^\[0\]<stdout>://'; \
	  $(PYTHON) -m torch.distributed.run --nproc_per_node 2 --master_port 29571 python/bench/bench_python.py --impl ddp \
	    --model $$model 2>/dev/null; \
	  for impl in sync pipe none; do $(VENV)/bin/horovodrs -np 2 $(PYTHON) python/bench/bench_python.py --impl $$impl \
	    --model $$model | sed 's/^\[0\]<stdout>://'; done; \
	  for impl in keras keras_sync keras_pipe keras_none; do TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrs -np 2 $(PYTHON) \
	    python/bench/bench_python.py --impl $$impl --model $$model 2>/dev/null | sed 's/^\[0\]<stdout>://'; done; \
	  done; \
	done

# One call reducing a group of 1-8 small tensors (a conv net's gradients) on 2 processes:
# horovod_rs's grouped_allreduce and allreduce_async beside torch's gloo; CSV
# grouped,<impl>,<how>,<tensors>,<us_per_call> (docs/python.md).
bench-grouped: $(VENV)/.horovod_rs $(VENV)/.torch
	@echo "grouped,impl,how,tensors,us_per_call"
	@$(VENV)/bin/horovodrs -np 2 $(PYTHON) python/bench/bench_grouped.py --impl horovod_rs | sed 's/^\[0\]<stdout>://'
	@$(PYTHON) -m torch.distributed.run --nproc_per_node 2 --master_port 29572 python/bench/bench_grouped.py \
	  --impl gloo 2>/dev/null

# What lockstep adds to a step beyond waiting for the slower process: a synchronous 4-byte
# allreduce's latency after the later of 2 processes calls it, with compute between calls;
# horovod_rs against gloo (docs/python.md).
bench-lockstep: $(VENV)/.horovod_rs $(VENV)/.torch
	@echo "lockstep,impl,compute_ms,p10_us,p50_us,p90_us"
	@$(VENV)/bin/horovodrs -np 2 $(PYTHON) python/bench/bench_lockstep.py --impl horovod_rs | sed 's/^\[0\]<stdout>://'
	@$(PYTHON) -m torch.distributed.run --nproc_per_node 2 --master_port 29573 python/bench/bench_lockstep.py \
	  --impl gloo 2>/dev/null

# The native trainer (candle) against torch on bench-estimator's MLP, one process each, the same
# rows and batches, at 1 and 2 threads, rounds alternating them; CSV
# trainer,<impl>,<threads>,<steps_per_s>,<loss> (docs/estimator.md).
TRAINER_ARGS ?= 51200 2 256 256
bench-trainer: $(VENV)/.torch
	cargo build --release -p horovod-bench --bin horovod-bench-train
	@echo "trainer,impl,threads,steps_per_s,loss"
	@for round in $$(seq $(BENCH_ROUNDS)); do for threads in 1 2; do \
	  RAYON_NUM_THREADS=$$threads ./target/release/horovod-bench-train $(TRAINER_ARGS); \
	  OMP_NUM_THREADS=$$threads $(PYTHON) examples/bench/bench_trainer.py $(TRAINER_ARGS) --threads $$threads; \
	done; done

# A Rossmann-like DataFrame (18 categorical + 18 continuous columns) into the
# trainer's tensors on every rank: Arrow straight from the executors versus a
# Parquet round trip, then the Rossmann model's training speed; one CSV.
INGEST_ROWS ?= 1000000
INGEST_REPEATS ?= 5
bench-ingest: tools jar-release
	cd native/bench-ingest && cargo build --release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --driver-memory 2g --class horovod.rs.examples.IngestBenchmark $(EXAMPLES_JAR) \
	  $(INGEST_ROWS) 2 native/bench-ingest/target/release/horovod-bench-ingest examples/rossmann/rossmann-model.json \
	  $(INGEST_REPEATS) | tee build/bench-ingest.csv

# The same model and DataFrame fit every way, beside the floor (the same torch training without
# Spark): horovod_rs's Keras, Torch and Lightning estimators on Arrow and through prepare_data +
# Parquet, Spark's TorchDistributor, Keras's MultiWorkerMirroredStrategy and the native estimator,
# then the Arrow fits again from a Spark Connect client, on a Rossmann-shaped MLP and on Horovod's
# MNIST example; one CSV with each fit's phases (docs/estimators.md). spark-submit hands
# the driver's stderr to stdout, TensorFlow's start-up lines with it: the CSV keeps the rows only.
ESTIMATOR_ARGS ?=
bench-estimator: tools jar-release $(VENV)/.pytest $(VENV)/.horovod_rs $(VENV)/.torch $(VENV)/.tensorflow $(VENV)/.connect \
                 $(VENV)/.estimator-extras
	TF_CPP_MIN_LOG_LEVEL=3 $(SPARK_SUBMIT) $(SPARK_ARGS) --conf spark.executorEnv.TF_CPP_MIN_LOG_LEVEL=3 \
	  examples/bench/bench_estimator.py $(ESTIMATOR_ARGS) 2>build/bench-estimator.log | \
	  tee /dev/stderr | grep -E '^(case|mlp|mnist),' > build/bench-estimator.csv

# The Run API's launch beside a plain, an empty barrier and an allGather barrier job of two tasks,
# in turn for LAUNCH_RUNS rounds (empty: LaunchBenchmark's default); CSV impl,run,seconds and each
# row's median (docs/launch.md).
LAUNCH_RUNS ?=
bench-launch: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.LaunchBenchmark $(EXAMPLES_JAR) $(LAUNCH_RUNS)

# The PySpark Run API's launch from a classic session and from a Spark Connect client, beside a
# plain two-task job of each; CSV session,impl,run,seconds (docs/launch.md).
bench-launch-python: tools jar-release $(VENV)/.horovod_rs $(VENV)/.pytest $(VENV)/.connect
	$(PYTHON) examples/bench/bench_run_api.py --master '$(MASTER)' --jar $(abspath $(JAR))

# How the job's size costs: the engine's negotiation at 64-4,096 simulated ranks, the rendezvous
# service taking 1,024 registrations, real ranks (threads) joining at 2-32; CSV
# scale,<what>,<ranks>,<value>,<unit> (docs/scale.md).
.PHONY: bench-scale
bench-scale:
	cargo build --release -p horovod-bench --bin horovod-bench-scale
	@mkdir -p build/bench
	bash -o pipefail -c './target/release/horovod-bench-scale | tee build/bench/scale.csv'

# The allreduce cost model at 8-1,024 ranks over 25/100/400 Gb/s (scripts/cost_model.py): its CSV,
# its check against the measured 2-rank TCP figures, and docs/bench/cost_model.png.
.PHONY: cost-model
cost-model: $(VENV)/.matplotlib
	$(PYTHON) scripts/cost_model.py --plot docs/bench/cost_model.png

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
