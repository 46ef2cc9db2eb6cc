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

.PHONY: demo test cargo-test java-test integration-test lint jar jar-release bench-launch tools clean

demo: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.LinearRegressionDemo $(EXAMPLES_JAR) 2

test: tools lint cargo-test java-test integration-test

## Tools ---------------------------------------------------------------------

tools: .tools/gradle.stamp $(VENV)/.pyspark-$(PYSPARK_VERSION)

.tools/gradle.stamp:
	@command -v gradle >/dev/null || { apt-get update -qq && apt-get install -y -qq gradle; }
	@mkdir -p .tools && touch $@

$(VENV)/.pyspark-$(PYSPARK_VERSION):
	python3 -m venv $(VENV)
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

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

cargo-test:
	cargo test --workspace

# Gradle stays quiet; the summary lists every test and ends with a pass/fail count.
java-test: jar
	rm -rf build/test-results/test
	$(GRADLE) test --continue || true
	python3 scripts/junit_summary.py build/test-results/test

integration-test: jar
	rm -rf build/test-results/integrationTest
	$(GRADLE) integrationTest -PsparkHome=$(SPARK_HOME) --continue || true
	python3 scripts/junit_summary.py build/test-results/integrationTest

## Benchmarks ----------------------------------------------------------------

bench-launch: tools jar-release
	$(SPARK_SUBMIT) $(SPARK_ARGS) --class horovod.rs.examples.LaunchBenchmark $(EXAMPLES_JAR)

clean:
	cargo clean
	rm -rf build .gradle
