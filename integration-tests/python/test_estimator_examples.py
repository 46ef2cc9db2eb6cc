"""The PyTorch Spark examples end to end, each as its own Spark application on local-cluster:
ours (examples/spark/pytorch), and Horovod's own MNIST examples with only their imports changed
when a Horovod source tree or git directory is given in HOROVOD_SOURCE."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
EXAMPLES = os.path.join(ROOT, "examples", "spark")
MASTER = "local-cluster[2,1,1024]"
HOROVOD_EXAMPLES = ["examples/spark/pytorch/pytorch_spark_mnist.py",
                    "examples/spark/pytorch/pytorch_lightning_spark_mnist.py",
                    "examples/spark/pytorch/pytorch_lightning_spark_mnist_legacy.py"]
# `import horovod.spark.torch as hvd`, `from horovod.spark.common.store import Store`
IMPORT_LINE = re.compile(r"^(\s*(?:import|from)\s+)horovod(?=[.\s,]|$)", re.MULTILINE)


def run(script, *args):
    result = subprocess.run([sys.executable, script, "--master", MASTER, "--num-proc", "2"] + list(args),
                            capture_output=True, text=True)
    assert result.returncode == 0, "%s failed:\n%s\n%s" % (script, result.stdout[-4000:], result.stderr[-4000:])
    return result.stdout


def accuracy(output):
    found = re.findall(r"Test accuracy: ([0-9.]+)", output)
    assert found, output[-4000:]
    return float(found[-1])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    sys.path.insert(0, EXAMPLES)
    import mnist_libsvm

    directory = tmp_path_factory.mktemp("mnist")
    # Horovod's net needs about 200 steps of its SGD to tell these digits apart.
    mnist_libsvm.write(str(directory / "mnist.bz2"), rows=6000)
    return str(directory)


# The scripts start their own classic sessions.
@pytest.mark.classic_only
@pytest.mark.slow
@pytest.mark.parametrize("example", ["torch_mnist.py", "lightning_mnist.py"])
def test_our_examples_learn_the_digits(example, data_dir, tmp_path):
    output = run(os.path.join(EXAMPLES, "pytorch", example), "--epochs", "2", "--data-dir", data_dir,
                 "--work-dir", str(tmp_path))
    assert accuracy(output) > 0.8


def horovod_file(path):
    source = os.environ.get("HOROVOD_SOURCE")
    if not source:
        pytest.skip("HOROVOD_SOURCE (a Horovod checkout or git directory) is not set")
    if os.path.isdir(os.path.join(source, "examples")):
        with open(os.path.join(source, path)) as f:
            return f.read()
    return subprocess.run(["git", "--git-dir", source, "show", "HEAD:" + path], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.classic_only
@pytest.mark.parametrize("path", HOROVOD_EXAMPLES)
def test_horovod_examples_run_with_only_their_imports_changed(path, data_dir, tmp_path):
    script = tmp_path / os.path.basename(path)
    script.write_text(IMPORT_LINE.sub(r"\1horovod_rs", horovod_file(path)))
    output = run(str(script), "--epochs", "6", "--batch-size", "64", "--data-dir", data_dir,
                 "--work-dir", str(tmp_path / "work"))
    assert accuracy(output) > 0.5
