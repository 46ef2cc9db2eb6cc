"""Lightning 1's ``stochastic_weight_avg=True`` trainer argument, which Horovod's scripts pass in a
Lightning estimator's ``trainer_args`` and Lightning 2 removed, as the callback the ranks add."""

import pytest

pl = pytest.importorskip("pytorch_lightning")
torch = pytest.importorskip("torch")

from horovod_rs.spark.lightning.remote import _lightning_one_swa  # noqa: E402


class Line(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_weights_are_averaged_from_the_optimizers_learning_rate_on():
    torch.manual_seed(0)
    x = torch.randn(64, 2)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    swa = _lightning_one_swa(pl)
    trainer = pl.Trainer(max_epochs=5, callbacks=[swa], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Line(), data)
    # Lightning 1's defaults: SWA over the last 20 % of the epochs (epochs 3 and 4 of 0-4), at the
    # rate the optimizer had as it began; the weights averaged at the end of each.
    assert (swa.swa_start, swa.swa_end, swa._swa_lrs) == (3, 4, [0.05])
    assert int(swa.n_averaged) == 2
