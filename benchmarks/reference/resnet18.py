"""A neutral reference for ResNet-18's step time: the chapter's concise PyTorch code,
plain eager nn.Module, nothing from this suite.

    python benchmarks/reference/resnet18.py [--batch 64] [--steps 5] [--threads N]

d2l's Residual and resnet18 as the book writes them (Conv2d with biases, BatchNorm2d,
ReLU, AdaptiveAvgPool2d, Linear; normal(0, 0.01) weights), trained with
torch.optim.SGD and F.cross_entropy on random 28x28 batches. Prints one JSON line:
the median seconds per training step after two warm-up steps."""
import argparse
import json
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F


class Residual(nn.Module):
    def __init__(self, input_channels, num_channels, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(input_channels, num_channels, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, kernel_size=3, padding=1)
        self.conv3 = (nn.Conv2d(input_channels, num_channels, kernel_size=1, stride=strides)
                      if use_1x1conv else None)
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        return F.relu(Y + X)


def resnet18(num_classes, in_channels=1):
    """d2l's "slightly modified" ResNet-18 (chapter: training on multiple GPUs)."""
    def resnet_block(in_channels, out_channels, num_residuals, first_block=False):
        blk = []
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.append(Residual(in_channels, out_channels, use_1x1conv=True, strides=2))
            else:
                blk.append(Residual(out_channels, out_channels))
        return nn.Sequential(*blk)

    net = nn.Sequential(nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
                        nn.BatchNorm2d(64), nn.ReLU())
    net.add_module("resnet_block1", resnet_block(64, 64, 2, first_block=True))
    net.add_module("resnet_block2", resnet_block(64, 128, 2))
    net.add_module("resnet_block3", resnet_block(128, 256, 2))
    net.add_module("resnet_block4", resnet_block(256, 512, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = resnet18(10)

    def init_weights(m):
        if type(m) in (nn.Linear, nn.Conv2d):
            nn.init.normal_(m.weight, std=0.01)
    net.apply(init_weights)
    X = torch.rand(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))
    # on a GPU the clock must wait for the queued kernels; on the CPU nothing is queued
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    if torch.cuda.is_available():
        net, X, y = net.cuda(), X.cuda(), y.cuda()
    trainer = torch.optim.SGD(net.parameters(), lr=0.1)
    times = []
    for step in range(2 + args.steps):
        sync()
        t0 = time.perf_counter()
        trainer.zero_grad()
        F.cross_entropy(net(X), y).backward()
        trainer.step()
        sync()
        if step >= 2:                       # the first two steps are warm-up
            times.append(time.perf_counter() - t0)
    print(json.dumps({"sec_per_step": statistics.median(times), "steps": args.steps,
                      "batch": args.batch, "threads": args.threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
