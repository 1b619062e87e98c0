"""The device-scopes model (common.experiments.scopes) in PyTorch: one nn.LSTM, two branches."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from common.experiments import scopes

from .devices import torch_device


def _t(x: np.ndarray, device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


class Scopes(scopes.Scopes):
    sharing = ("One nn.LSTM whose parameters live on branch a's device. Branch b runs the "
               "same module through torch.func.functional_call on copies of its parameters "
               "made with .to(branch b's device) in every step; autograd carries their "
               "gradients back onto the originals, where branch a's add to them (on one "
               "device .to returns the parameter itself: nothing is copied, unless `replicate` "
               "asks for the copy there too). nn.LSTM's gate "
               "order is the common i, f, g, o; the common bias is bias_ih_l0, and bias_hh_l0 "
               "is held at zero and not trained (their sum is the gate bias)")

    # True: copy the shared weights for branch b even where it shares branch a's device
    # (the tests use it to run the copy and the gradient's way back on a CPU); None: .to
    replicate = None

    def build(self, params, placement):
        self.dev = placement.translated(torch_device)
        self.lstm = nn.LSTM(scopes.D, scopes.H, batch_first=True).to(self.dev["branch_a"])
        self.lstm.bias_hh_l0.requires_grad_(False)
        self.head = nn.Linear(2 * scopes.H, 1).to(self.dev["merge"])
        self.load_params(params)

    def _mine(self):
        """The trained tensors, in the common layout's order (transposed where noted)."""
        return [self.lstm.weight_ih_l0, self.lstm.weight_hh_l0, self.lstm.bias_ih_l0,
                self.head.weight, self.head.bias]

    def load_params(self, params):
        W_x, W_h, b, W, c = params
        with torch.no_grad():
            for mine, value in zip(self._mine(), (W_x.T, W_h.T, b, W.T, c)):
                mine.copy_(_t(value, mine.device))
            self.lstm.bias_hh_l0.zero_()

    def read_params(self):
        W_x, W_h, b, W, c = (p.detach().cpu().numpy() for p in self._mine())
        return [W_x.T, W_h.T, b, W.T, c]

    def _forward(self, Xa, Xb, y):
        dev = self.dev
        _, (ha, _) = self.lstm(_t(Xa, dev["branch_a"]))
        _, (hb, _) = functional_call(self.lstm, self._branch_b_weights(),
                                     (_t(Xb, dev["branch_b"]),))
        hab = torch.cat([ha[-1].to(dev["merge"]), hb[-1].to(dev["merge"])], dim=1)
        z = self.head(hab)[:, 0]
        loss = F.binary_cross_entropy_with_logits(z, _t(y, dev["merge"]))
        return loss, z, ha, hb

    def _branch_b_weights(self):
        """Branch b's copies of the shared LSTM weights, on its device; autograd carries
        their gradient back onto the originals."""
        copy = (lambda v: v.clone()) if self.replicate else (lambda v: v.to(self.dev["branch_b"]))
        return {k: copy(v) for k, v in self.lstm.named_parameters()}

    def forward_backward(self, Xa, Xb, y):
        loss, z, _, _ = self._forward(Xa, Xb, y)
        loss.backward()
        grads = [p.grad.cpu().numpy() for p in self._mine()]
        for p in self._mine():
            p.grad = None
        W_x, W_h, b, W, c = grads
        return (torch.sigmoid(z).detach().cpu().numpy(), float(loss.detach()),
                [W_x.T, W_h.T, b, W.T, c])

    def step(self, Xa, Xb, y, lr):
        loss = self._forward(Xa, Xb, y)[0]
        loss.backward()
        with torch.no_grad():
            for p in self._mine():
                p -= lr * p.grad
                p.grad = None
        return loss.detach()

    def parts(self, Xa, Xb):
        with torch.no_grad():
            _, z, ha, hb = self._forward(Xa, Xb, np.zeros(len(Xa), np.float32))
        return ha, hb, z, self.lstm.weight_ih_l0
