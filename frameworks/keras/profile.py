"""The op-level profiler of Keras: its backend's own (TensorFlow's, torch.profiler,
JAX's; frameworks/<framework>/profile.py, picked in frameworks/keras/backends), with
rules for the names Keras gives to what it runs ahead of the backend's rules."""
from __future__ import annotations

from .backends import current

# (regex searched in an event's name, op class): Keras's own names, tried before the
# backend's rules (the first match wins).
RULES = (
    # XLA (on JAX) fuses the update into the weight gradient's convolution, which a
    # fusion is named by (its heaviest op): a convolution, not the update
    (r"^convolution\b.*/(sgd|SGD)(_\d+)*/", "conv backward"),
    # the optimizer's variables are updated under its name scope (TensorFlow: "sgd_1/")
    (r"(^|/)(sgd|SGD)(_\d+)*/", "optimizer update"),
    # The ViT's layers, by the names frameworks/keras/models.py gives them: its
    # LayerNormalizations (blockB_ln1, blockB_ln2, head_ln), whose ops on JAX are
    # keras.ops' moments as BatchNormalization's are (so first), and on TensorFlow are
    # in their scope; its MultiHeadAttention's own ops on TensorFlow (blockB_attn: einsum,
    # Softmax, their gradients; its query, key, value and attention_output projections
    # are dense layers). On JAX its attention is jax.nn's rule's (vmap), on torch scaled
    # dot-product attention. GELU on JAX is keras's gelu (its gradient too)
    (r"^(?!data movement).*\bjvp\((block\d+_ln\d|head_ln)\)|/(block\d+_ln\d|head_ln)(_\d+)?/",
     "layernorm"),
    (r"/block\d+_attn(_\d+)?/(?!(query|key|value|attention_output)(_\d+)?/)", "attention"),
    (r"^(?!data movement).* @ gelu$", "gelu"),
    # on JAX, BatchNormalization's ops are its keras.ops (batch_normalization, moments);
    # Conv2D's bias is an add in the layer's scope (frameworks/keras/models.py names
    # every convolution after its parameters: stem_conv, stageS_blockB_convN, _shortcut)
    (r"^(?!data movement).* @ (batch_normalization|moments)$", "batchnorm"),
    (r"^elementwise: .*\(\w*(conv\d*|shortcut)\)/add @ add$", "conv forward"),
    (r"^reduce backward: .*\(\w*(conv\d*|shortcut)\)\)/reduce_sum @ add$", "conv backward"),
    # fit's batches on torch come from a torch DataLoader over the arrays: copies
    (r"^enumerate\(DataLoader\)#", "copies and layout"),
)


class KerasProfiler(current.Profiler):
    rules = RULES + current.Profiler.rules


class Profile:
    def op_profiler(self, folder):
        return KerasProfiler(folder)
