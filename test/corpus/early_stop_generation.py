"""Early-stopping generation with while_loop (paper use case): decode until max steps or the stop
probability exceeds a threshold.
"""
import torch
from torch._higher_order_ops import while_loop


class Decoder(torch.nn.Module):
    def __init__(self, d=8, vocab=10):
        super().__init__()
        self.emb = torch.nn.Parameter(torch.randn(vocab, d) * 0.5)
        self.Wh = torch.nn.Parameter(torch.randn(d, d) * 0.4)
        self.out = torch.nn.Parameter(torch.randn(d, vocab) * 0.5)
        self.stop_id = 0

    def forward(self, h0, max_steps):
        def cond_fn(step, h, logp_sum, stop_p):
            return (step < max_steps) & (stop_p < 0.3)

        def body_fn(step, h, logp_sum, stop_p):
            logits = h @ self.out
            logp = torch.log_softmax(logits, dim=-1)
            probs = torch.exp(logp)
            # soft (differentiable) next-token embedding instead of argmax sampling
            nxt = probs @ self.emb
            h = torch.tanh(h @ self.Wh + nxt)
            return step + 1, h, logp_sum + logp.amax(-1), probs[:, self.stop_id].amax()

        init = (torch.zeros((), dtype=torch.int64, device=h0.device), h0, torch.zeros(h0.shape[0], device=h0.device), torch.zeros((), device=h0.device))
        return while_loop(cond_fn, body_fn, init)


torch.manual_seed(0)
model = Decoder()
example_inputs = (torch.randn(2, 8), torch.tensor(20, dtype=torch.int64))
