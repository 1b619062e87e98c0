"""A plain Keras 3 program, nothing from the suite: the reference the suite's Keras
row is measured against (as benchmarks/reference/d2l.py is for PyTorch).

    FMNIST_DIR=/usr/share/datasets/fashion-mnist python benchmarks/reference/plain_keras.py DEVICES EPOCHS

The chapter's LeNet as a Sequential model, SGD at lr 0.2 on the summed-then-averaged
cross-entropy from logits, model.fit on the NumPy arrays at batch 256, shuffled each
epoch, as a Keras user writes it (one device: Keras's default placement; DEVICES
must be 1). Prints one JSON line: the time of every epoch (the first includes
tracing), and test accuracy."""
import gzip
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

D = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(D, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


class EpochTimes(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(time.perf_counter() - self.t)


def main():
    devices = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if devices != 1:
        sys.exit("keras_reference: one device only")
    X = idx("train-images-idx3-ubyte.gz")[..., None].astype(np.float32) / 255
    y = idx("train-labels-idx1-ubyte.gz").astype(np.int64)
    Xt = idx("t10k-images-idx3-ubyte.gz")[..., None].astype(np.float32) / 255
    yt = idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)
    init = keras.initializers.RandomNormal(stddev=0.01, seed=0)      # the chapter's init
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(20, 3, activation="relu", kernel_initializer=init),
        layers.AveragePooling2D(2),
        layers.Conv2D(50, 5, activation="relu", kernel_initializer=init),
        layers.AveragePooling2D(2),
        layers.Flatten(),
        layers.Dense(128, activation="relu", kernel_initializer=init),
        layers.Dense(10, kernel_initializer=init),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = EpochTimes()
    timer.times = []
    model.fit(X, y, batch_size=256, epochs=epochs, shuffle=True, verbose=0, callbacks=[timer])
    acc = float((model.predict(Xt, batch_size=1000, verbose=0).argmax(1) == yt).mean())
    print(json.dumps({"impl": "plain-keras", "devices": 1, "epochs": epochs,
                      "sec_per_epoch": timer.times, "test_acc": acc}))


if __name__ == "__main__":
    main()
