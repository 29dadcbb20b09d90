"""cond nested inside cond: three-way piecewise function selected by data-dependent predicates."""
import torch


def piecewise(x):
    s = x.mean()

    def positive(x, s):
        def large(x, s):
            return torch.log(x.abs() + 1.0)

        def medium(x, s):
            return torch.tanh(x)

        return torch.cond(s > 0.5, large, medium, (x, s))

    def negative(x, s):
        return torch.exp(x) - 1.0

    return torch.cond(s > 0, positive, negative, (x, s))


torch.manual_seed(0)
model = piecewise
example_inputs = (torch.randn(3, 7) + 0.3,)
