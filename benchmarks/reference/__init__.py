"""Reference programs the suite sets its own implementations against, written as their
sources write them: the chapter's from-scratch multi-GPU code (d2l.py), a plain Keras 3
program (plain_keras.py) and the chapter's concise ResNet-18 in PyTorch (resnet18.py)."""
