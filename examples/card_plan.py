"""Planning with the card time model: a GPT-2-small-shaped transformer block.

Runs the block (layer norm, q/k/v projection, causal attention, output
projection, MLP with GELU, residuals; 768 wide, 12 heads) with
FLEX_STUB_TIMING=card (docs/timing.md) and prints what a Spyre card would take:

  * the modeled time of one layer, split by op class, each with the error
    upstream's cost model publishes for the class;
  * what overlap saves when each layer's weights come from the host: copying
    layer i+1's weights on a side stream while layer i computes, against one
    stream that copies, then computes;
  * what a larger batch would cost per layer.

Every figure is modeled card time: it depends only on the ops launched, not on
this machine. The CPU still computes every value (bfloat16, two bytes like the
card's DLFloat16), so a long sequence takes a while here.

    python examples/card_plan.py                 # --seq 256 --layers 4 --batch 4
    python examples/card_plan.py --seq 1024
"""

import argparse
import os

# Read once, when the runtime starts: set it before importing torch.
os.environ.setdefault("FLEX_STUB_TIMING", "card")

import torch  # noqa: E402  (registers torch.spyre)
import torch.nn.functional as F  # noqa: E402

WIDTH, HEADS = 768, 12
DTYPE = torch.bfloat16


def make_weights(device):
    """One layer's parameters (GPT-2 small's shapes)."""
    def r(*shape):
        return (torch.randn(*shape) / shape[-1] ** 0.5).to(DTYPE).to(device)
    return {
        "ln1": (torch.ones(WIDTH, dtype=DTYPE, device=device), r(WIDTH)),
        "qkv": (r(3 * WIDTH, WIDTH), r(3 * WIDTH)),
        "proj": (r(WIDTH, WIDTH), r(WIDTH)),
        "ln2": (torch.ones(WIDTH, dtype=DTYPE, device=device), r(WIDTH)),
        "up": (r(4 * WIDTH, WIDTH), r(4 * WIDTH)),
        "down": (r(WIDTH, 4 * WIDTH), r(WIDTH)),
    }


def layer(x, w):
    batch, seq, _ = x.shape
    h = F.layer_norm(x, (WIDTH,), *w["ln1"])
    q, k, v = F.linear(h, *w["qkv"]).split(WIDTH, dim=-1)
    heads = [t.reshape(batch, seq, HEADS, WIDTH // HEADS).transpose(1, 2) for t in (q, k, v)]
    a = F.scaled_dot_product_attention(*heads, is_causal=True)
    x = x + F.linear(a.transpose(1, 2).reshape(batch, seq, WIDTH), *w["proj"])
    h = F.layer_norm(x, (WIDTH,), *w["ln2"])
    return x + F.linear(F.gelu(F.linear(h, *w["up"])), *w["down"])


def modeled_ms(fn):
    """fn's modeled card time on the current stream, in ms (waits for it)."""
    start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def per_layer(batch, seq, weights):
    x = torch.randn(batch, seq, WIDTH, dtype=DTYPE, device="spyre")
    torch.spyre.synchronize()
    torch.spyre.card_summary(reset=True)
    ms = modeled_ms(lambda: layer(x, weights))
    return ms, torch.spyre.card_summary()


def streamed(layers, seq, host_weights, prefetch):
    """`layers` layers whose weights are copied from (pinned) host memory:
    on a side stream one layer ahead (prefetch) or on the compute stream."""
    x = torch.randn(1, seq, WIDTH, dtype=DTYPE, device="spyre")
    main, side = torch.spyre.current_stream(), torch.spyre.Stream()

    def load(i, stream):
        with torch.spyre.stream(stream):
            return {k: tuple(t.to("spyre", non_blocking=True) for t in v)
                    for k, v in host_weights[i].items()}

    def run():
        y = x
        ready = load(0, side if prefetch else main)
        for i in range(layers):
            if prefetch:
                main.wait_stream(side)
            w = ready
            if i + 1 < layers:
                if prefetch:
                    side.wait_stream(main)  # the side stream's copies follow the layer's start
                ready = load(i + 1, side if prefetch else main)
            y = layer(y, w)
        main.wait_stream(side)
        return y

    torch.spyre.synchronize()
    return modeled_ms(run)


def main(argv=None):
    parser = argparse.ArgumentParser(description="a GPT-2-small block on the card time model")
    parser.add_argument("--seq", type=int, default=256, help="sequence length (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="layers streamed (default 4)")
    parser.add_argument("--batch", type=int, default=4, help="the larger batch (default 4)")
    args = parser.parse_args(argv)
    if torch.spyre.timing_model() != "card":
        raise SystemExit("card_plan.py needs FLEX_STUB_TIMING=card (or unset)")

    torch.manual_seed(0)
    weights = make_weights("spyre")
    with torch.no_grad():
        layer(torch.randn(1, 64, WIDTH, dtype=DTYPE, device="spyre"), weights)  # first calls
        one_ms, summary = per_layer(1, args.seq, weights)
        print(f"GPT-2-small block, batch 1, sequence {args.seq} (modeled Spyre card time)")
        print(f"one layer: {one_ms:.6f} ms")
        for line in torch.spyre.format_card_summary(summary).splitlines()[:-1]:
            print(f"  {line}")

        host = [{k: tuple(t.cpu().pin_memory() for t in v) for k, v in weights.items()}
                for _ in range(args.layers)]
        serial = streamed(args.layers, args.seq, host, prefetch=False)
        overlapped = streamed(args.layers, args.seq, host, prefetch=True)
        print(f"{args.layers} layers, weights from the host: one stream {serial:.6f} ms, "
              f"prefetch on a side stream {overlapped:.6f} ms, overlap saves "
              f"{serial - overlapped:.6f} ms")

        big_ms, _ = per_layer(args.batch, args.seq, weights)
        print(f"batch {args.batch}: {big_ms:.6f} ms per layer, {big_ms / one_ms:.2f}x batch 1's "
              f"time for {args.batch}x the tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
