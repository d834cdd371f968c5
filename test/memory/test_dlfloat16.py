"""DLFloat16 numerics (docs/tensors.md, "DLFloat16"): the conversion, bit-exact with IBM's
published NNP1 code on every float16 and bfloat16 input; the conformance table of the docs,
row by row, through the conversion and through device memory under each profile; the census;
the switch (TORCH_SPYRE_NUMERICS) and its default under the card's rules; what each kind of
write rounds; the overflow report; and a small transformer trained under the switch."""

import json
import math
import re

import pytest
import torch

from conftest import run_python

from _helpers import ROOT
PROFILES = ("nnp1", "card-2026-06")
_C = torch.spyre._C


# ---------------------------------------------------------------- the conversion


def nnp1_encode(fp32_bits):
    """NNP1::convert (onnx-mlir src/Accelerators/NNPA/Support/Stickify/DLF16Conversion.hpp,
    205fd3f1), restated step by step on a float32's bits: the exponent rebiased before
    rounding, half a unit added to the 23-bit fraction, its carry moved into the exponent,
    NINF above the largest magnitude that rounds to the largest finite value, +-0 when the
    exponent is negative."""
    sign = fp32_bits >> 31
    exponent = ((fp32_bits >> 23) & 0xFF) - 127 + 31
    fraction = (fp32_bits & 0x7FFFFF) + (1 << 13)
    if fraction > 0x7FFFFF:
        fraction = 0
        exponent += 1
    code = sign << 15
    if exponent >= 0:
        largest = ((63 + 127 - 31) << 23) | (510 << 14) | ((1 << 13) - 1)
        if fp32_bits & 0x7FFFFFFF <= largest:
            code |= (exponent << 9) | (fraction >> 14)
        else:
            code |= 0x7FFF
    return code


def nnp1_widen(code):
    """NNP1's DLFloat16 -> float32: +-0, NaN for NINF, else exact. float32 bits (NaN: 0x7FC00000)."""
    if code & 0x7FFF == 0:
        return (code >> 15) << 31
    if code & 0x7FFF == 0x7FFF:
        return 0x7FC00000
    return ((code >> 15) << 31) | (((code >> 9 & 0x3F) - 31 + 127) << 23) | ((code & 0x1FF) << 14)


def every(dtype):
    """All 65 536 bit patterns of a 16-bit dtype, as float32 values (exact)."""
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype).float()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nnp1_is_bit_exact_with_ibms_code_on_every_input(dtype):
    values = every(dtype)
    fp32_bits = [b & 0xFFFFFFFF for b in values.view(torch.int32).tolist()]
    codes = _C._dlfloat16_bits(values, "nnp1")
    assert codes.tolist() == [nnp1_encode(b) for b in fp32_bits]
    widened = _C._dlfloat16_values(codes, "nnp1").view(torch.int32)
    assert [b & 0xFFFFFFFF for b in widened.tolist()] == [nnp1_widen(c) for c in codes.tolist()]


def test_every_code_widens_exactly_and_encodes_back_to_itself():
    codes = torch.arange(65536, dtype=torch.int32)
    for profile in PROFILES:
        values = _C._dlfloat16_values(codes, profile)
        finite = (codes & 0x7FFF != 0x7FFF) & (codes & 0x7FFF != 0)  # not NINF, not +-0
        assert torch.equal(_C._dlfloat16_bits(values, profile)[finite], codes[finite])
    assert _C._dlfloat16_values(torch.tensor([0x7FFE, 0x0001], dtype=torch.int32), "nnp1").tolist() == [
        8573157376.0, 2.0**-31 * (1 + 2.0**-9)]


def test_the_conversion_refuses_what_it_does_not_convert():
    with pytest.raises(ValueError, match=r"^unknown DLFloat16 profile 'nnp2' \(expected nnp1 or "
                                         r"card-2026-06\)"):
        _C._dlfloat16_bits(torch.zeros(1), "nnp2")
    with pytest.raises(ValueError, match=r"^_dlfloat16_values: 65536 is not a 16-bit code"):
        _C._dlfloat16_values(torch.tensor([65536], dtype=torch.int32), "nnp1")
    with pytest.raises(ValueError, match=r"^_dlfloat16_bits: expected a CPU float32 tensor, "
                                         r"got Half on cpu"):
        _C._dlfloat16_bits(torch.zeros(1, dtype=torch.float16), "nnp1")


# ---------------------------------------------------------------- the conformance table


def conformance_rows():
    """The rows of docs/tensors.md's conformance table: (value, dtype, {profile: (bits, read back)})."""
    text = (ROOT / "docs" / "tensors.md").read_text()
    section = text[text.index("### Conformance"):]
    section = section[:section.index("\n\n", section.index("|---"))]
    names = {"inf": math.inf, "nan": math.nan}
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[0].startswith("`"):
            continue
        value = eval(re.match(r"`([^`]*)`", cells[0]).group(1), {"__builtins__": {}}, names)
        dtype = getattr(torch, cells[1])
        expected = {}
        for profile, (bits, back) in zip(PROFILES, (cells[2:4], cells[4:6])):
            expected[profile] = (int(bits.strip("`"), 16),
                                 eval(back.strip("`"), {"__builtins__": {}}, names))
        rows.append((value, dtype, expected))
    return rows


def same_value(a, b):
    """Equal as numbers, NaN equal to NaN, and +0 told from -0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def test_the_conformance_table_has_every_corner():
    rows = conformance_rows()
    assert len(rows) == 17
    values = [v for v, _, _ in rows]
    for corner in (65504, 65536, 2.0**-31, 8573157376.0, 2.0**-31 * (1 + 2.0**-9), math.inf,
                   -math.inf, 2.0**33):
        assert corner in values
    assert any(math.isnan(v) for v in values)


@pytest.mark.parametrize("profile", PROFILES)
def test_each_conformance_row_converts_as_the_table_says(profile):
    for value, dtype, expected in conformance_rows():
        held = torch.tensor([value], dtype=dtype).float()  # what the dtype holds
        assert same_value(held.item(), value), (value, dtype)
        bits, back = expected[profile]
        code = _C._dlfloat16_bits(held, profile).item()
        assert code == bits, (value, dtype, hex(code))
        read = _C._dlfloat16_values(torch.tensor([code], dtype=torch.int32), profile)
        assert same_value(read.to(dtype).item(), back), (value, dtype, read)


@pytest.mark.parametrize("profile", PROFILES)
def test_each_conformance_row_reads_back_from_device_memory(profile):
    """Written by a copy from the host, a fill, an op's float16/bfloat16 output computed from
    float32 (aten::mul.out) and a converting device copy: each reads back as the table says."""
    rows = [(v, str(d).removeprefix("torch."), e[profile][1]) for v, d, e in conformance_rows()
            if d != torch.float32]
    proc = run_python(f"""
        import json, math, torch
        inf, nan = math.inf, math.nan
        assert torch.spyre.numerics() == "dl16:{profile}", torch.spyre.numerics()
        out = []
        for value, dtype, _ in {rows!r}:
            dtype = getattr(torch, dtype)
            host = torch.tensor([value], dtype=dtype)
            wide = host.float().to("spyre")
            written = [host.to("spyre"), torch.full((1,), value, dtype=dtype, device="spyre"),
                       torch.mul(wide, 1, out=torch.empty(1, dtype=dtype, device="spyre")),
                       wide.to(dtype)]
            out.append([repr(t.cpu().item()) for t in written])
        print(json.dumps(out))
    """, env={"TORCH_SPYRE_NUMERICS": f"dl16:{profile}"})
    names = {"inf": math.inf, "nan": math.nan}
    for (value, dtype, back), reads in zip(rows, json.loads(proc.stdout)):
        for how, read in zip(("copy", "fill", "op", "device copy"), reads):
            assert same_value(eval(read, {"__builtins__": {}}, names), back), (
                value, dtype, how, read)


def test_the_census():
    codes = {p: {d: _C._dlfloat16_bits(every(d), p) for d in (torch.float16, torch.bfloat16)}
             for p in PROFILES}

    def read_back(profile, dtype):
        return _C._dlfloat16_values(codes[profile][dtype], profile).to(dtype).float()

    half = every(torch.float16)
    magnitude = torch.arange(65536, dtype=torch.int32) & 0x7FFF
    subnormal = (magnitude > 0) & (magnitude < 0x0400)
    normal = (magnitude >= 0x0400) & (magnitude < 0x7C00)
    assert int(subnormal.sum()) == 2 * 1023 and int(normal.sum()) == 61440
    for profile in PROFILES:
        assert torch.equal(read_back(profile, torch.float16)[subnormal], half[subnormal])
    # Every inexact normal float16 value is a tie: the profiles round it to the two
    # DLFloat16 values it lies halfway between.
    up, down = read_back("nnp1", torch.float16), read_back("card-2026-06", torch.float16)
    inexact = normal & (up != half)
    assert int(inexact.sum()) == 30720 and torch.equal(inexact, normal & (down != half))
    finite = inexact & up.isfinite()  # all but +-65504, which nnp1 takes past float16's range
    assert int(finite.sum()) == 30718
    assert torch.equal((up - half)[finite], (half - down)[finite])

    bf16 = every(torch.bfloat16)
    positive = bf16[1:0x7F80]  # the positive finite bfloat16 values
    assert positive.numel() == 32639
    smallest, largest = 2.0**-31 * (1 + 2.0**-9), 8573157376.0
    in_range = (positive >= smallest) & (positive <= largest)
    counts = (int(in_range.sum()), int((positive > largest).sum()), int((positive < smallest).sum()))
    assert counts == (8191, 12160, 12288)
    for profile in PROFILES:
        back = read_back(profile, torch.bfloat16)
        exact = (back == bf16) & bf16.isfinite() & (bf16 != 0)
        assert torch.equal(exact[1:0x7F80], in_range)
        assert back[1:0x7F80][(positive < smallest)].eq(0).all()
        assert positive[positive < smallest].max().item() == 2.0**-31


# ---------------------------------------------------------------- the switch


def test_by_default_the_device_keeps_torchs_formats():
    assert torch.spyre.numerics() == "ieee"
    tie = torch.tensor([1025.0, 65504.0], dtype=torch.float16, device="spyre")
    assert tie.cpu().tolist() == [1025.0, 65504.0]
    assert torch.spyre.numerics_report() == {}


@pytest.mark.parametrize("env, expected", [
    ({"TORCH_SPYRE_NUMERICS": "dl16"}, "dl16:nnp1"),
    ({"TORCH_SPYRE_NUMERICS": "dl16:card-2026-06"}, "dl16:card-2026-06"),
    ({"TORCH_SPYRE_CARD_RULES": "1"}, "dl16:nnp1"),
    ({"TORCH_SPYRE_CARD_RULES": "1", "TORCH_SPYRE_NUMERICS": "ieee"}, "ieee"),
    ({"TORCH_SPYRE_NUMERICS": ""}, "ieee"),
])
def test_the_switch_and_its_default_under_the_card_rules(env, expected):
    proc = run_python("""
        import torch
        print(torch.spyre.numerics(), torch.tensor([1025.0], dtype=torch.float16).to("spyre").item())
    """, env=env)
    assert proc.stdout.split() == [expected, "1025.0" if expected == "ieee" else
                                   "1026.0" if expected == "dl16:nnp1" else "1024.0"]


def test_a_bad_value_of_the_switch_is_refused_naming_it():
    proc = run_python("""
        import torch
        for call in (torch.spyre.numerics, lambda: torch.empty(2, device="spyre")):
            try:
                call()
            except ValueError as e:
                print(str(e).splitlines()[0])
    """, env={"TORCH_SPYRE_NUMERICS": "dl16:nnp2"})
    message = ("TORCH_SPYRE_NUMERICS='dl16:nnp2' is not a valid setting (expected ieee: float16 "
               "and bfloat16 as CPU holds them, dl16 or dl16:nnp1: DLFloat16 with IBM's published "
               "NNP1 rounding, dl16:card-2026-06: DLFloat16 as cards rounded in June 2026; unset: "
               "dl16 under TORCH_SPYRE_CARD_RULES=1, else ieee)")
    assert proc.stdout.splitlines() == [message, message]


def test_numerics_report_takes_a_bool():
    with pytest.raises(TypeError, match=r"^numerics_report: reset must be a bool, got 1$"):
        torch.spyre.numerics_report(1)


# ---------------------------------------------------------------- what rounds


def test_every_kind_of_write_rounds_and_reads_are_exact():
    """1025 and 2050 are float16 ties (10 significant bits in DLFloat16, 11 in float16); nnp1
    rounds them away from zero. Arithmetic computes as CPU does, then its result rounds."""
    proc = run_python("""
        import torch
        half = dict(dtype=torch.float16, device="spyre")
        x = torch.tensor([1024.0, 2048.0], **half)
        one = torch.tensor([1.0, 2.0], **half)
        results = {
            "copy": torch.tensor([1025.0, 2050.0], dtype=torch.float16).to("spyre"),
            "fill": torch.full((2,), 1025.0, **half),
            "op": x + one,                            # 1025, 2050 on CPU
            "in place": x.clone().add_(one),
            "out=": torch.add(x, one, out=torch.empty(2, **half)),
            "from float32": torch.tensor([1025.0, 2050.0], device="spyre").half(),
            "same dtype copy": (x + one).clone(),
        }
        for name, t in results.items():
            print(name, t.cpu().tolist())
        print("float32 keeps", (torch.tensor([1024.0], device="spyre") + 1).item())
        # Random draws reach the device by a copy: every value drawn is a DLFloat16 value.
        drawn = torch.rand(4096, **half).cpu().float()
        codes = torch.spyre._C._dlfloat16_bits(drawn, "nnp1")
        on_cpu = torch.rand(4096, dtype=torch.float16).float()  # about half of these are ties
        cpu_codes = torch.spyre._C._dlfloat16_bits(on_cpu, "nnp1")
        print("random", torch.equal(torch.spyre._C._dlfloat16_values(codes, "nnp1"), drawn),
              torch.equal(torch.spyre._C._dlfloat16_values(cpu_codes, "nnp1"), on_cpu))
        g = torch.spyre.Graph()
        a, b = torch.tensor([1024.0], **half), torch.tensor([2.0], **half)
        torch.spyre.synchronize()
        with torch.spyre.graph(g):
            c = a + b
        a.fill_(2048.0)                              # 2050 on CPU
        g.replay()
        print("graph replay", c.cpu().tolist())
    """, env={"TORCH_SPYRE_NUMERICS": "dl16"})
    lines = proc.stdout.splitlines()
    assert lines == [
        "copy [1026.0, 2052.0]", "fill [1026.0, 1026.0]", "op [1026.0, 2052.0]",
        "in place [1026.0, 2052.0]", "out= [1026.0, 2052.0]", "from float32 [1026.0, 2052.0]",
        "same dtype copy [1026.0, 2052.0]", "float32 keeps 1025.0", "random True False",
        "graph replay [2052.0]",
    ]


def test_a_value_beyond_the_cards_range_is_reported_with_its_op():
    proc = run_python("""
        import torch
        x = torch.tensor([2.0**30, 1.0, -(2.0**31)], dtype=torch.bfloat16, device="spyre")
        y = x * 16                                   # 2**34 and -2**35: beyond 8.57e9
        torch.full((3,), 1e10, dtype=torch.bfloat16, device="spyre")
        z = torch.tensor([1e10], dtype=torch.bfloat16).to("spyre")
        torch.spyre.synchronize()
        print(y.cpu().tolist())
        print(sorted(torch.spyre.numerics_report(reset=True).items()))
        print(torch.spyre.numerics_report())
    """, env={"TORCH_SPYRE_NUMERICS": "dl16"})
    assert proc.stdout.splitlines() == [
        "[nan, 16.0, nan]",
        "[('aten::copy_', 1), ('aten::fill_', 3), ('aten::mul.out', 2)]",
        "{}",
    ]


# ---------------------------------------------------------------- what a user sees

TRAIN = """
import json, torch
from torch import nn

def train(dtype, device, steps=20):
    torch.manual_seed(0)
    model = nn.ModuleDict(dict(
        embed=nn.Embedding(16, 32),
        layer=nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True),
        head=nn.Linear(32, 16)))
    model.to(dtype).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    tokens = torch.randint(0, 16, (8, 12), generator=torch.Generator().manual_seed(1))
    inputs, targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    losses, largest = [], []
    for _ in range(steps):
        logits = model["head"](model["layer"](model["embed"](inputs)))
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, 16), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        largest.append(logits.detach().abs().max().item())
    return losses, largest

print(json.dumps({str(d): train(d, "spyre") for d in (torch.float32, torch.bfloat16, torch.float16)}))
"""


@pytest.mark.timeout(240)
def test_a_transformer_trains_under_the_switch_within_dlfloat16s_rounding():
    """20 SGD steps of a one-layer transformer in float32, bfloat16 and float16, on spyre with
    the switch off and on. float32 stays IEEE and DLFloat16 holds every bfloat16 value of its
    range: those losses are the same. float16: every value written is rounded once more, by at
    most u = 2^-10 of itself, and nnp1's ties all go away from zero, so the roundings can add up
    instead of cancelling. Worst case, after the k-th step's forward pass every value, the
    logits z included, is within k·u of itself (relative) in the switch-off run, and a
    cross-entropy loss moves by at most ||softmax(z) - onehot||_1 · max|Δz| <= 2·k·u·max|z|
    (docs/tensors.md, "DLFloat16")."""
    ieee, dl16 = (json.loads(run_python(TRAIN, timeout=200, env=env).stdout)
                  for env in ({}, {"TORCH_SPYRE_NUMERICS": "dl16"}))
    assert dl16["torch.float32"] == ieee["torch.float32"]
    assert dl16["torch.bfloat16"] == ieee["torch.bfloat16"]
    (off, largest), (on, _) = ieee["torch.float16"], dl16["torch.float16"]
    assert off[-1] < off[0] - 1  # it learns
    u = 2.0**-10
    for k, (a, b, z) in enumerate(zip(on, off, largest), start=1):
        assert abs(a - b) <= 2 * k * u * z, (k, a, b, z)
    assert on[-1] != off[-1]  # the switch rounds


# ---------------------------------------------------------------- compiled kernels, collectives


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_compiled_kernels_outputs_round():
    proc = run_python("""
        import torch
        half = dict(dtype=torch.float16, device="spyre")
        add = torch.compile(lambda a, b: a + b)
        print(add(torch.tensor([1024.0, 2048.0], **half), torch.tensor([1.0, 2.0], **half))
              .cpu().tolist())
        mul = torch.compile(lambda a: a * 16)
        torch.spyre.numerics_report(reset=True)
        print(mul(torch.tensor([2.0**30, 1.0], dtype=torch.bfloat16, device="spyre")).cpu().tolist())
        print(list(torch.spyre.numerics_report().values()))
    """, env={"TORCH_SPYRE_NUMERICS": "dl16"}, timeout=280)
    assert proc.stdout.splitlines() == ["[1026.0, 2052.0]", "[nan, 16.0]", "[1]"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("staging", ["0", "1"], ids=["direct", "staged"])
def test_all_reduce_results_round(tmp_path, staging):
    """Rank r holds 512 + r: the sum, 1025, is a float16 tie; nnp1 stores 1026."""
    from _helpers import PRELUDE, rank_results, torchrun

    torchrun(tmp_path, PRELUDE + """
dist.init_process_group("spyreccl")
t = torch.tensor([512.0 + dist.get_rank(), 1.0], dtype=torch.float16, device="spyre")
dist.all_reduce(t)
torch.spyre.synchronize()
out["sum"] = t.cpu().tolist()
out["numerics"] = torch.spyre.numerics()
dist.destroy_process_group()
save()
""", env={"TORCH_SPYRE_NUMERICS": "dl16", "SPYRECCL_STAGING": staging}, timeout=280)
    assert rank_results(tmp_path) == [{"sum": [1026.0, 2.0], "numerics": "dl16:nnp1"}] * 2
