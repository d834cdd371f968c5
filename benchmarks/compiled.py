"""torch.compile rows (issue 20): compiled spyre against compiled CPU and
against eager spyre, in the same process (A B A B, medians)."""

import time

import torch
import torch.nn as nn

from measure import REPORT, Row, at_most, interleaved, median


def make_mlp(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    return model, torch.randn(64, 256, device=device)


def make_block(device):
    # Training mode with dropout 0 (measured under no_grad): in eval mode eager
    # would take the fused _transformer_encoder_layer_fwd kernel instead of the
    # ops a user's own block is made of.
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, activation="gelu",
                                       batch_first=True).to(device)
    return block, torch.randn(8, 128, 128, device=device)


def forward(model, x):
    model(x)
    if x.device.type == "spyre":
        torch.spyre.synchronize()


def first_compile_ns(device):
    """Compile and first call of the MLP with inductor's caches empty."""
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    model, x = make_mlp(device)
    with torch.no_grad(), fresh_cache():
        start = time.perf_counter_ns()
        forward(torch.compile(model), x)
        return time.perf_counter_ns() - start


def rows(quick, repeats, selected):
    result = []
    namespace = {"forward": forward}
    if selected("compile.mlp_forward"):
        (m_cpu, x_cpu), (m_dev, x_dev) = make_mlp("cpu"), make_mlp("spyre")
        namespace.update(cpu=torch.compile(m_cpu), x=x_cpu, dev=torch.compile(m_dev), dx=x_dev)
        with torch.no_grad():
            ours, ref = interleaved("forward(dev, dx)", "forward(cpu, x)", namespace,
                                    5 if quick else 50, repeats)
        result.append(Row("compile.mlp_forward", ours, ref, "ns", "compiled on cpu",
                          at_most(1.3)))
    if selected("compile.transformer_block"):
        # The second row runs the same block on CPU: what inductor itself gains
        # on this host, the ceiling of the first, since spyre runs CPU's kernels.
        # Report only: issue 34 replaced the first row's target (<= 0.8x eager)
        # with graphs.transformer_block's (reduce-overhead against compiled CPU).
        for device, name, target in [("spyre", "compile.transformer_block", REPORT),
                                     ("cpu", "compile.transformer_block_on_cpu", REPORT)]:
            block, x = make_block(device)
            namespace.update(eager=block, compiled=torch.compile(block), dx=x)
            with torch.no_grad():
                ours, ref = interleaved("forward(compiled, dx)", "forward(eager, dx)", namespace,
                                        2 if quick else 20, repeats)
            result.append(Row(name, ours, ref, "ns", f"eager {device}", target))
    if selected("compile.first_compile"):
        ours, ref = [], []
        for _ in range(1 if quick else min(repeats, 3)):
            ours.append(first_compile_ns("spyre"))
            ref.append(first_compile_ns("cpu"))
        result.append(Row("compile.first_compile", median(ours), median(ref), "ns",
                          "first compile on cpu", at_most(1.5)))
    return result
