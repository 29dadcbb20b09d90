"""Greedy decoding in a while_loop: embed the last token, a GRUCell step, argmax of the logits,
and the token written into an output buffer with index_put, until a stop token or the length
limit. The index_put runs as an ATen call inside the native loop.
"""
import torch
from torch._higher_order_ops import while_loop


class GreedyDecoder(torch.nn.Module):
    def __init__(self, vocab=12, d=16, max_len=8, stop=0):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.cell = torch.nn.GRUCell(d, d)
        self.out = torch.nn.Linear(d, vocab)
        self.max_len, self.stop = max_len, stop

    def forward(self, h0, first):
        tokens = torch.full((self.max_len,), -1, dtype=torch.int64, device=h0.device)

        def cond_fn(i, tok, h, out):
            return (i < self.max_len) & (tok != self.stop)

        def body_fn(i, tok, h, out):
            h = self.cell(self.emb(tok.reshape(1)), h)
            tok = self.out(h).argmax(-1).reshape(())
            out = out.index_put((i.reshape(1),), tok.reshape(1))
            return i + 1, tok, h, out

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64, device=h0.device), first, h0, tokens))


torch.manual_seed(0)
model = GreedyDecoder().eval()
example_inputs = (torch.randn(1, 16) * 0.5, torch.tensor(3))
