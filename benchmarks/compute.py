"""Compute rows (issue 15): ops launched on streams, against the same work on
CPU tensors in the same process (A B A B, medians)."""

import time

import torch

from measure import REPORT, Row, at_most, interleaved, median

SLEEP_MS = 50.0


def add_loop(a, b, n):
    for _ in range(n):
        a + b
    torch.spyre.synchronize()


def add_loop_sanitized(a, b, n):
    """add_loop with the stream sanitizer on (every launch checked and recorded)."""
    torch.spyre.sanitizer.enable()
    try:
        add_loop(a, b, n)
    finally:
        torch.spyre.sanitizer.disable()


def matmul(x, w):
    x @ w
    torch.spyre.synchronize()


def make_mlp(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, device=device)
    target = torch.randint(0, 10, (64,), device=device)
    return model, opt, x, target


def train_step(model, opt, x, target):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), target).backward()
    opt.step()
    torch.spyre.synchronize()


def make_gpt2(device):
    """A small GPT-2 (transformers, random weights) and an 8-token prompt on `device`, or
    None without transformers (an optional test dependency)."""
    try:
        import transformers
    except ImportError:
        return None
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000,
                                     n_positions=64)
    model = transformers.GPT2LMHeadModel(config).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (1, 8)).to(device)
    return model, ids


def generate(model, ids):
    """24 new tokens, greedy, as a chat loop makes them (one forward per token)."""
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, min_new_tokens=24, do_sample=False,
                             pad_token_id=0)
    return out.cpu()


def queue_behind_sleep(stream, y):
    """ns to queue 100 small ops behind a 50 ms sleep on `stream`."""
    with torch.spyre.stream(stream):
        torch.spyre._sleep(SLEEP_MS)
        for _ in range(100):
            y = y + 1
    return y


def sleep_only(stream):
    with torch.spyre.stream(stream):
        torch.spyre._sleep(SLEEP_MS)
    stream.synchronize()


def independent_work(streams, xs, w, n):
    """n matmul chains, chain i on streams[i % len(streams)]."""
    for i, x in enumerate(xs):
        with torch.spyre.stream(streams[i % len(streams)]):
            for _ in range(n):
                x = torch.tanh(x @ w)
    torch.spyre.synchronize()


def rows(quick, repeats, selected):
    result = []
    namespace = {"torch": torch}
    if selected("compute.host_runs_ahead"):
        s = torch.spyre.Stream()
        y = torch.ones(16, device="spyre")
        s.wait_stream(torch.spyre.current_stream())  # y is read on s
        queue_behind_sleep(s, y)  # warm: each op's first call is tried at the call
        s.synchronize()
        ours, ref = [], []
        for _ in range(repeats):
            start = time.perf_counter_ns()
            queue_behind_sleep(s, y)
            ours.append(time.perf_counter_ns() - start)  # the queueing only
            s.synchronize()
            start = time.perf_counter_ns()
            sleep_only(s)
            ref.append(time.perf_counter_ns() - start)
        result.append(Row("compute.host_runs_ahead", median(ours), median(ref), "ns",
                          "the 50 ms sleep", at_most(0.05)))
    for name, size, loops, target in (
        ("compute.add_1k", 1 << 10, 1000, at_most(3)),
        ("compute.add_1m", 1 << 20, 100, at_most(1.3)),
    ):
        if not selected(name):
            continue
        a, b = torch.randn(size), torch.randn(size)
        da, db = a.to("spyre"), b.to("spyre")
        namespace.update(add_loop=add_loop, a=a, b=b, da=da, db=db,
                         n=loops // 10 if quick else loops)
        ours, ref = interleaved("add_loop(da, db, n)", "add_loop(a, b, n)", namespace, 1, repeats)
        n = namespace["n"]
        result.append(Row(name, ours / n, ref / n, "ns", "cpu a + b", target))
    if selected("sanitizer.add_1k_on"):
        da, db = torch.randn(1 << 10, device="spyre"), torch.randn(1 << 10, device="spyre")
        n = 100 if quick else 1000
        namespace.update(add_loop=add_loop, add_loop_sanitized=add_loop_sanitized, da=da, db=db, n=n)
        ours, ref = interleaved("add_loop_sanitized(da, db, n)", "add_loop(da, db, n)", namespace, 1,
                                repeats)
        result.append(Row("sanitizer.add_1k_on", ours / n, ref / n, "ns", "sanitizer off",
                          at_most(3)))
    if selected("compute.matmul_512"):
        x, w = torch.randn(512, 512), torch.randn(512, 512)
        namespace.update(matmul=matmul, x=x, w=w, dx=x.to("spyre"), dw=w.to("spyre"))
        ours, ref = interleaved("matmul(dx, dw)", "matmul(x, w)", namespace, 2 if quick else 20,
                                repeats)
        result.append(Row("compute.matmul_512", ours, ref, "ns", "cpu x @ w", at_most(1.2)))
    if selected("compute.mlp_train_step"):
        namespace.update(train_step=train_step, cpu=make_mlp("cpu"), dev=make_mlp("spyre"))
        ours, ref = interleaved("train_step(*dev)", "train_step(*cpu)", namespace,
                                2 if quick else 20, repeats)
        result.append(Row("compute.mlp_train_step", ours, ref, "ns", "cpu step", at_most(2)))
    if selected("compute.gpt2_generate"):
        dev, cpu = make_gpt2("spyre"), make_gpt2("cpu")
        if dev is not None:
            assert torch.equal(generate(*dev), generate(*cpu)), "GPT-2 generates other tokens"
            namespace.update(generate=generate, dev=dev, cpu=cpu)
            ours, ref = interleaved("generate(*dev)", "generate(*cpu)", namespace,
                                    1 if quick else 5, repeats)
            result.append(Row("compute.gpt2_generate", ours, ref, "ns", "cpu generate",
                              REPORT))
    if selected("compute.two_streams"):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one engine per stream, one core each
        try:
            w = torch.randn(256, 256, device="spyre") / 16
            xs = [torch.randn(256, 256, device="spyre") for _ in range(2)]
            one, two = [torch.spyre.Stream()], [torch.spyre.Stream(), torch.spyre.Stream()]
            torch.spyre.synchronize()  # w and xs are read on these streams
            n = 4 if quick else 40
            namespace.update(work=independent_work, one=one, two=two, xs=xs, w=w, chains=n)
            ours, ref = interleaved("work(two, xs, w, chains)", "work(one, xs, w, chains)",
                                    namespace, 1, repeats)
        finally:
            torch.set_num_threads(threads)
        result.append(Row("compute.two_streams", ours, ref, "ns", "same work on 1 stream",
                          at_most(0.65)))
    return result
