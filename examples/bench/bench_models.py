"""The models of ``make bench-estimator``, one definition for every way that fits them (the
estimators, TorchDistributor and the floor, ``bench_floor.py``):

- ``mlp``: a Rossmann-shaped MLP on 36 float columns (36-H-H-1, ReLU, Adam 1e-3, MSE);
- ``mnist``: Horovod's Spark MNIST example net (two convolutions, dropout, 50 hidden units,
  log-softmax, SGD 0.01 with momentum 0.5, NLL) on 28x28 images.

Learning rates are the single-process ones; every way multiplies them by the number of
processes, as Horovod's estimators do.
"""

COLUMNS = ["c%d" % i for i in range(36)]


def torch_model(case, hidden=256):
    import torch
    from torch import nn
    from torch.nn import functional as F

    if case == "mlp":
        return nn.Sequential(nn.Linear(36, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                             nn.Linear(hidden, 1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
            self.conv2_drop = nn.Dropout2d()
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, features):
            x = features.float().reshape(-1, 1, 28, 28)
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = F.relu(self.fc1(x.view(-1, 320)))
            x = F.dropout(x, training=self.training)
            return F.log_softmax(self.fc2(x), dim=1)

    torch.manual_seed(0)
    return Net()


def torch_optimizer(case, model, size=1):
    import torch

    if case == "mlp":
        return torch.optim.Adam(model.parameters(), lr=1e-3 * size)
    return torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.5)


def torch_loss(case):
    from torch.nn import functional as F

    if case == "mlp":
        return lambda output, label: F.mse_loss(output, label.reshape(output.shape))
    return lambda output, label: F.nll_loss(output, label.reshape(-1).long())


def keras_model(case, hidden=256):
    import tensorflow as tf

    layers = tf.keras.layers
    if case == "mlp":
        inputs = tf.keras.Input(shape=(36,))
        x = layers.Dense(hidden, activation="relu")(inputs)
        x = layers.Dense(hidden, activation="relu")(x)
        return tf.keras.Model(inputs, layers.Dense(1)(x))
    inputs = tf.keras.Input(shape=(784,))
    x = layers.Reshape((28, 28, 1))(inputs)
    x = layers.Conv2D(10, 5)(x)
    x = layers.Activation("relu")(layers.MaxPooling2D(2)(x))
    x = layers.SpatialDropout2D(0.5)(layers.Conv2D(20, 5)(x))
    x = layers.Activation("relu")(layers.MaxPooling2D(2)(x))
    x = layers.Dropout(0.5)(layers.Dense(50, activation="relu")(layers.Flatten()(x)))
    return tf.keras.Model(inputs, layers.Dense(10, activation="softmax")(x))


def keras_training(case):
    """``(optimizer, loss)`` for ``keras_model(case)``."""
    import tensorflow as tf

    if case == "mlp":
        return tf.keras.optimizers.Adam(1e-3), "mse"
    return tf.keras.optimizers.SGD(0.01, momentum=0.5), "categorical_crossentropy"


def lightning_module(case, hidden=256):
    """The torch model as a LightningModule with its optimizer and loss (batches: Horovod's dicts of
    ``features`` and ``label``)."""
    import pytorch_lightning as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch_model(case, hidden)
            self.loss = torch_loss(case)

        def forward(self, features):
            return self.net(features)

        def configure_optimizers(self):
            return torch_optimizer(case, self)

        def training_step(self, batch, batch_idx):
            loss = self.loss(self(batch["features"].float()), batch["label"].float())
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.loss(self(batch["features"].float()), batch["label"].float()))

    return Module()
