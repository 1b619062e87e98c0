"""Baseline: the chapter's own "multi-GPU training from scratch" PyTorch code
(Dive into Deep Learning), as written, with only nn.parallel.scatter swapped for
torch.chunk when the devices are CPUs. Run as it is, to measure the suite against:

    FMNIST_DIR=/usr/share/datasets/fashion-mnist python benchmarks/reference/d2l.py DEVICES EPOCHS

It prints one JSON line: {"impl": "d2l-torch", "devices": k, "sec_per_epoch": [...], "test_acc": ...}.
The reference that the suite's PyTorch scratch row is measured against
(python -m benchmarks.vs_reference --against d2l); kept as written, not in the suite's
style on purpose."""
import gzip, json, os, sys, time
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

D = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
def idx(name):
    b = gzip.open(os.path.join(D, name)).read()
    off = 16 if b[3] == 3 else 8
    a = np.frombuffer(b, np.uint8, offset=off)
    return a.reshape(-1, 1, 28, 28) if b[3] == 3 else a
Xtr = torch.tensor(idx("train-images-idx3-ubyte.gz"), dtype=torch.float32) / 255
ytr = torch.tensor(idx("train-labels-idx1-ubyte.gz"), dtype=torch.long)
Xte = torch.tensor(idx("t10k-images-idx3-ubyte.gz"), dtype=torch.float32) / 255
yte = torch.tensor(idx("t10k-labels-idx1-ubyte.gz"), dtype=torch.long)

torch.manual_seed(0)
scale = 0.01
W1 = torch.randn(size=(20, 1, 3, 3)) * scale; b1 = torch.zeros(20)
W2 = torch.randn(size=(50, 20, 5, 5)) * scale; b2 = torch.zeros(50)
W3 = torch.randn(size=(800, 128)) * scale; b3 = torch.zeros(128)
W4 = torch.randn(size=(128, 10)) * scale; b4 = torch.zeros(10)
params = [W1, b1, W2, b2, W3, b3, W4, b4]

def lenet(X, params):
    h1 = F.avg_pool2d(F.relu(F.conv2d(input=X, weight=params[0], bias=params[1])), kernel_size=(2, 2), stride=(2, 2))
    h2 = F.avg_pool2d(F.relu(F.conv2d(input=h1, weight=params[2], bias=params[3])), kernel_size=(2, 2), stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3 = F.relu(torch.mm(h2, params[4]) + params[5])
    return torch.mm(h3, params[6]) + params[7]

loss = nn.CrossEntropyLoss(reduction='none')

def get_params(params, device):
    new_params = [p.clone().to(device) for p in params]
    for p in new_params:
        p.requires_grad_()
    return new_params

def allreduce(data):
    for i in range(1, len(data)):
        data[0][:] += data[i].to(data[0].device)
    for i in range(1, len(data)):
        data[i][:] = data[0].to(data[i].device)

def scatter(X, devices):
    if all(d.type == "cuda" for d in devices):
        return nn.parallel.scatter(X, devices)
    return [c.to(d) for c, d in zip(X.chunk(len(devices)), devices)]

def split_batch(X, y, devices):
    assert X.shape[0] == y.shape[0]
    return scatter(X, devices), scatter(y, devices)

def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()

def train_batch(X, y, device_params, devices, lr):
    X_shards, y_shards = split_batch(X, y, devices)
    ls = [loss(lenet(X_shard, device_W), y_shard).sum()
          for X_shard, y_shard, device_W in zip(X_shards, y_shards, device_params)]
    for l in ls:
        l.backward()
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([device_params[c][i].grad for c in range(len(devices))])
    for param in device_params:
        sgd(param, lr, X.shape[0])

def accuracy(params, device):
    with torch.no_grad():
        correct = 0
        for i in range(0, len(Xte), 1024):
            correct += (lenet(Xte[i:i+1024].to(device), params).argmax(1).cpu() == yte[i:i+1024]).sum().item()
    return correct / len(Xte)

def train(devices, batch_size, lr, num_epochs):
    device_params = [get_params(params, d) for d in devices]
    times = []
    g = torch.Generator().manual_seed(1)
    for epoch in range(num_epochs):
        t = time.perf_counter()
        perm = torch.randperm(len(Xtr), generator=g)
        for s in range(0, len(Xtr) - batch_size + 1, batch_size):
            ix = perm[s:s+batch_size]
            train_batch(Xtr[ix], ytr[ix], device_params, devices, lr)
        if devices[0].type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return accuracy(device_params[0], devices[0]), times

if __name__ == "__main__":
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    kind = "cuda" if torch.cuda.is_available() else "cpu"
    devices = [torch.device(f"cuda:{i}") if kind == "cuda" else torch.device("cpu") for i in range(k)]
    acc, times = train(devices, 256, 0.2, epochs)
    print(json.dumps({"impl": "d2l-torch", "devices": k, "device": kind, "threads": torch.get_num_threads(),
                      "epochs": epochs, "sec_per_epoch": times, "test_acc": acc}))
