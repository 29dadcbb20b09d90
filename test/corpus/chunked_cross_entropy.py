"""Chunked cross-entropy via scan (paper use case): logits computed chunk by chunk from hidden states
and a weight matrix, loss summed in the carry.
"""
import torch
from torch._higher_order_ops import scan


class ChunkedCE(torch.nn.Module):
    def __init__(self, d=8, vocab=16, chunk=4):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d, vocab) * 0.3)
        self.chunk = chunk

    def forward(self, hidden, targets_onehot):
        # hidden: [N, d], targets_onehot: [N, vocab]; split N into chunks of `chunk` rows
        n, d = hidden.shape
        hs = hidden.reshape(n // self.chunk, self.chunk, d)
        ts = targets_onehot.reshape(n // self.chunk, self.chunk, -1)

        def step(loss_sum, chunk):
            h, t = chunk
            logits = h @ self.W
            logp = torch.log_softmax(logits, dim=-1)
            nll = -(logp * t).sum(-1)
            return loss_sum + nll.sum(), nll.clone()

        total, per_token = scan(step, torch.zeros((), device=hs.device), (hs, ts))
        return total / n, per_token.reshape(n)


torch.manual_seed(0)
model = ChunkedCE()
_targets = torch.randint(0, 16, (20,))
example_inputs = (torch.randn(20, 8), torch.nn.functional.one_hot(_targets, 16).float())
