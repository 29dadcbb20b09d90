"""Shape-dependent mask with cond (paper use case): predicate computed from the data (x.sum() > 0)."""
import torch


class MaskedAttentionScores(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.Wq = torch.nn.Parameter(torch.randn(d, d) * 0.3)
        self.Wk = torch.nn.Parameter(torch.randn(d, d) * 0.3)

    def forward(self, x):
        q, k = x @ self.Wq, x @ self.Wk
        scores = q @ k.transpose(0, 1)
        n = x.shape[0]
        causal = torch.ones(n, n, device=x.device).tril() > 0

        def masked(scores, causal):
            return torch.softmax(torch.where(causal, scores, torch.full_like(scores, -1e9)), dim=-1)

        def full(scores, causal):
            return torch.softmax(scores, dim=-1)

        return torch.cond(x.sum() > 0, masked, full, (scores, causal))


torch.manual_seed(0)
model = MaskedAttentionScores()
example_inputs = (torch.randn(6, 8),)
