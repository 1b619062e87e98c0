"""Keras has no from-scratch data-parallel loop of its own (see KNOWN_GAPS): every
scratch entry point says so, and the tests check that it still does."""
from common.core.contract import NotApplicable
from common.facts import registry


class Scratch:
    def _gap(self, *args, **kwargs):
        raise NotApplicable(registry.gap(self.name, "scratch"))

    get_params = read_params = read_state = write_params = allreduce = split_batch = _gap
    shard_loss_and_grads = grads = sgd = add = bind_train_batch = _gap
    rows = concat = assign = record = backprop = _gap
