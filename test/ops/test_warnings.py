"""Issue 17: ordinary training code on spyre emits no warning that CPU does not
(the common losses and reductions, forward and backward), and gives CPU's values."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn


def inputs(device):
    g = torch.Generator().manual_seed(0)
    d = dict(
        x=torch.randn(4, 5, generator=g),
        t=torch.randn(4, 5, generator=g),
        p=torch.rand(4, 5, generator=g),
        x1=torch.randn(4, 5, generator=g),
        cls=torch.tensor([0, 2, 4, 1]),
        sign=torch.tensor([1.0, -1.0, 1.0, -1.0]),
        ml=torch.tensor([[0, 1, -1, 0, 0]] * 4),
    )
    d = {k: v.to(device) for k, v in d.items()}
    d["x"].requires_grad_(True)
    return d


# name -> f(inputs, reduction)
LOSSES = {
    "mse_loss": lambda d, r: F.mse_loss(d["x"], d["t"], reduction=r),
    "l1_loss": lambda d, r: F.l1_loss(d["x"], d["t"], reduction=r),
    "smooth_l1_loss": lambda d, r: F.smooth_l1_loss(d["x"], d["t"], reduction=r),
    "huber_loss": lambda d, r: F.huber_loss(d["x"], d["t"], reduction=r),
    "cross_entropy": lambda d, r: F.cross_entropy(d["x"], d["cls"], reduction=r),
    "cross_entropy_probs": lambda d, r: F.cross_entropy(d["x"], d["p"].softmax(1), reduction=r),
    "nll_loss": lambda d, r: F.nll_loss(d["x"].log_softmax(1), d["cls"], reduction=r),
    "binary_cross_entropy":
        lambda d, r: F.binary_cross_entropy(d["x"].sigmoid(), d["p"], reduction=r),
    "bce_with_logits":
        lambda d, r: F.binary_cross_entropy_with_logits(d["x"], d["p"], reduction=r),
    "kl_div": lambda d, r: F.kl_div(d["x"].log_softmax(1), d["p"].softmax(1),
                                    reduction="batchmean" if r == "mean" else r),
    "soft_margin_loss": lambda d, r: F.soft_margin_loss(d["x"], d["t"].sign(), reduction=r),
    "margin_ranking_loss":
        lambda d, r: F.margin_ranking_loss(d["x"][:, 0], d["x1"][:, 0], d["sign"], reduction=r),
    "hinge_embedding_loss": lambda d, r: F.hinge_embedding_loss(d["x"], d["t"].sign(), reduction=r),
    "cosine_embedding_loss":
        lambda d, r: F.cosine_embedding_loss(d["x"], d["x1"], d["sign"], reduction=r),
    "poisson_nll_loss": lambda d, r: F.poisson_nll_loss(d["x"], d["p"], reduction=r),
    "gaussian_nll_loss":
        lambda d, r: F.gaussian_nll_loss(d["x"], d["t"], d["p"] + 0.1, reduction=r),
    "triplet_margin_loss":
        lambda d, r: F.triplet_margin_loss(d["x"], d["x1"], d["t"], reduction=r),
    "multi_margin_loss": lambda d, r: F.multi_margin_loss(d["x"], d["cls"], reduction=r),
    "multilabel_soft_margin_loss":
        lambda d, r: F.multilabel_soft_margin_loss(d["x"], (d["p"] > 0.5).float(), reduction=r),
    "multilabel_margin_loss":
        lambda d, r: F.multilabel_margin_loss(d["x"], d["ml"], reduction=r),
}



def run_quietly(fn):
    """fn() with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


def loss_and_grad(name, reduction, device):
    d = inputs(device)
    out = LOSSES[name](d, reduction)
    (out.sum() if out.dim() else out).backward()
    return out.detach().cpu(), d["x"].grad.cpu()


@pytest.mark.parametrize("name,reduction", [
    (name, reduction)
    for name in LOSSES for reduction in ("none", "mean", "sum")
])
def test_loss_warns_nothing_and_equals_cpu(name, reduction):
    expected = run_quietly(lambda: loss_and_grad(name, reduction, "cpu"))
    got = run_quietly(lambda: loss_and_grad(name, reduction, "spyre"))
    assert torch.equal(got[0], expected[0])
    assert torch.equal(got[1], expected[1])


# name -> f(x)
REDUCTIONS = {
    "sum": lambda x: x.sum(),
    "sum_dim": lambda x: x.sum(1),
    "mean": lambda x: x.mean(),
    "mean_dim": lambda x: x.mean(0, keepdim=True),
    "prod": lambda x: x.prod(),
    "amax": lambda x: x.amax(1),
    "amin": lambda x: x.amin(),
    "max": lambda x: x.max(),
    "max_dim": lambda x: x.max(1).values,
    "min_dim": lambda x: x.min(0).values,
    "argmax": lambda x: x.argmax(),
    "argmin": lambda x: x.argmin(1),
    "std": lambda x: x.std(),
    "var_dim": lambda x: x.var(1),
    "norm": lambda x: x.norm(),
    "logsumexp": lambda x: x.logsumexp(1),
    "cumsum": lambda x: x.cumsum(1),
    "all": lambda x: (x > 0).all(),
    "any": lambda x: (x > 0).any(1),
    "count_nonzero": lambda x: torch.count_nonzero(x > 0),
    "median": lambda x: x.median(),
    "softmax": lambda x: x.softmax(1),
}


def reduce_and_grad(name, device):
    x = inputs(device)["x"]
    out = REDUCTIONS[name](x)
    if not out.is_floating_point():
        return out.cpu(), None
    out.sum().backward()
    return out.detach().cpu(), x.grad.cpu()


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_warns_nothing_and_equals_cpu(name):
    expected = run_quietly(lambda: reduce_and_grad(name, "cpu"))
    got = run_quietly(lambda: reduce_and_grad(name, "spyre"))
    assert torch.equal(got[0], expected[0])
    assert (got[1] is None) == (expected[1] is None)
    if got[1] is not None:
        assert torch.equal(got[1], expected[1])


def train(device, loss_name, optimizer_class):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 5)).to(device)
    optimizer = optimizer_class(net.parameters(), lr=0.01)
    d = inputs(device)
    x = d["x"].detach()
    for _ in range(2):
        out = net(x)
        if loss_name == "cross_entropy":
            loss = F.cross_entropy(out, d["cls"])
        else:
            loss = F.mse_loss(out, d["t"])
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
    return [p.detach().cpu() for p in net.parameters()]


@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("loss_name", [
    "cross_entropy",
    "mse_loss",
])
def test_training_loop_warns_nothing_and_equals_cpu(loss_name, optimizer_class):
    expected = run_quietly(lambda: train("cpu", loss_name, optimizer_class))
    got = run_quietly(lambda: train("spyre", loss_name, optimizer_class))
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
