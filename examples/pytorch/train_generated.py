"""A Horovod PyTorch training script, run unchanged but for its import, on generated data.

It follows Horovod's pytorch_mnist example step by step (DistributedSampler, learning rate scaled
by the number of ranks, parameter and optimizer-state broadcast, DistributedOptimizer with
optional fp16 compression, metrics averaged with allreduce), on MNIST-shaped images whose class
is a bright 4x4 patch at one of ten places, so that no download is needed.

    horovodrs -np 2 python examples/pytorch/train_generated.py --epochs 2

Exits with 1 unless the test accuracy reaches --min-accuracy.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import horovod_rs.torch as hvd  # the only change: was `import horovod.torch as hvd`

parser = argparse.ArgumentParser(description="Horovod-style PyTorch training on generated images")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--min-accuracy", type=float, default=0.9)


def generated_images(n, seed):
    """n noisy 1x28x28 images; class c lights a 4x4 patch at row 4 + 2 * (c // 5) * 8, column 2 + (c % 5) * 5."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = 0.3 * torch.randn(n, 1, 28, 28, generator=g)
    for i, c in enumerate(labels.tolist()):
        row, col = 4 + (c // 5) * 12, 2 + (c % 5) * 5
        images[i, 0, row:row + 4, col:col + 4] += 2.0
    return torch.utils.data.TensorDataset(images, labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_dataset, test_dataset = generated_images(4000, 1), generated_images(1000, 2)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=1000, sampler=test_sampler)

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()

        model.eval()
        test_loss, correct = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += output.argmax(1).eq(target).float().sum().item()
        test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print("epoch %d: test loss %.4f, accuracy %.2f%%" % (epoch, test_loss, 100 * accuracy))
    raise SystemExit(0 if accuracy >= args.min_accuracy else 1)


if __name__ == "__main__":
    main()
