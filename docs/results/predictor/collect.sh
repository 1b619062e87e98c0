#!/usr/bin/env bash
# The records behind docs/results/cpu-2core-predictor.md, measured anew into $OUT
# (default: results/predictor, so that the committed records stay as they are; give the
# predict command of that page $OUT's folders instead of docs/results/predictor's). Run
# it on an otherwise idle machine with 2 or more cores and real Fashion-MNIST (make
# data): about 20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-results/predictor}
PY=${PY:-.venv/bin/python}
compare() { "$PY" -m benchmarks.compare --mode native --epochs 1 --repeat "${REPEAT:-2}" --cores-per-device 1 --no-plots "$@"; }
LENET="--framework all --steps-per-epoch 30 --eval-samples 200"
RESNET="--framework pytorch,paddle --model resnet18 --lr 0.1 --steps-per-epoch 8 --eval-samples 50"

# fitted on: one device on one core (and on two, for the frameworks whose devices share
# one process's threads), at two batch sizes
for b in ${FIT_BATCHES:-64 128}; do
  compare $LENET --devices 1 --batch-size $b --out "$OUT/lenet-fit-b$b"
  compare --framework tensorflow,mxnet,keras-tensorflow --steps-per-epoch 30 --eval-samples 200 \
    --devices 1 --batch-size $b --cores-per-device 2 --out "$OUT/lenet-fit2c-b$b"
done
for b in 4 8; do
  compare $RESNET --devices 1 --batch-size $b --out "$OUT/resnet18-fit-b$b"
done
# held back: other batch sizes, two devices (a core each), two simulated nodes
for b in 256 512; do
  compare $LENET --devices 1,2 --batch-size $b --out "$OUT/lenet-b$b"
done
compare $LENET --devices 1 --nodes 2 --launcher local --batch-size 256 --out "$OUT/lenet-nodes-b256"
for b in 16 32; do
  compare $RESNET --devices 1,2 --batch-size $b --out "$OUT/resnet18-b$b"
done
compare $RESNET --devices 1 --nodes 2 --launcher local --batch-size 16 --out "$OUT/resnet18-nodes-b16"
# small per-device batches, where the all-reduce is a larger share of the step
for b in 4 8; do
  compare $RESNET --devices 2 --batch-size $b --out "$OUT/resnet18-x2-b$b"
done
compare $RESNET --devices 1 --nodes 2 --launcher local --batch-size 8 --out "$OUT/resnet18-nodes-b8"
# the all-reduce the link is fitted to (up to 1 MiB) and checked against (16, 256 MiB)
"$PY" -m benchmarks.devices --experiment allreduce --device cpu --threads 2 --no-plots \
  --out "$OUT/allreduce"
