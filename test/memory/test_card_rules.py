"""The card's data-type rules (docs/tensors.md, "Running like a card"): the card-rules tier
(test/card_rules_suite.py, run here in a subprocess with TORCH_SPYRE_CARD_RULES=1), a bad
value of the switch, the int64 downcast warning's setting, and the default, where every dtype works and results equal CPU's."""

import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from torch.testing._internal.common_utils import set_warn_always_context

from conftest import DEVICE_ENV, load_factor, run_python

from _helpers import ROOT
# The tier's tests, parametrized cases counted one by one.
CARD_RULES_TESTS = 103


@pytest.mark.timeout(240)
def test_the_card_rules_tier_passes():
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    env["TORCH_SPYRE_CARD_RULES"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test/card_rules_suite.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=220 * load_factor())
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0 and re.fullmatch(rf"{CARD_RULES_TESTS} passed in [0-9.]+s", summary), (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")


def test_a_bad_value_of_the_switch_is_refused_naming_it():
    proc = run_python("""
        import torch
        for call in (torch.spyre.card_rules, lambda: torch.empty(2, device="spyre")):
            try:
                call()
            except ValueError as e:
                print(str(e).splitlines()[0])
    """, env={"TORCH_SPYRE_CARD_RULES": "yes"})
    message = ("TORCH_SPYRE_CARD_RULES='yes' is not a valid setting (expected 1: the card's "
               "data-type rules, or 0 / unset: every dtype, results equal to CPU's)")
    assert proc.stdout.splitlines() == [message, message]


# ---------------------------------------------------------------- the default: switch off


def test_by_default_the_rules_are_off():
    assert torch.spyre.card_rules() is False
    supported = torch.accelerator.get_device_capability("spyre")["supported_dtypes"]
    assert {torch.float64, torch.complex128, torch.uint64} <= supported


def test_by_default_float64_and_int64_keep_every_bit_without_a_warning():
    doubles = torch.tensor([0.1, 2.0**60 + 2.0**8], dtype=torch.float64)
    longs = torch.tensor([2**31, -(2**31) - 1, 2**40 + 3], dtype=torch.int64)
    with set_warn_always_context(True), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert torch.equal(doubles.to("spyre").cpu(), doubles)
        assert longs.to("spyre").cpu().tolist() == [2**31, -(2**31) - 1, 2**40 + 3]
        assert torch.full((1,), 2**31, dtype=torch.int64, device="spyre").cpu().tolist() == [2**31]
    assert [str(w.message) for w in rec] == []


def test_by_default_storages_hold_the_bytes_asked_for():
    assert torch.tensor([1, 2], dtype=torch.float16, device="spyre").untyped_storage().nbytes() == 4
    assert (torch.ones(3, device="spyre") + 1).untyped_storage().nbytes() == 12


def test_downcast_warning_is_on_by_default_and_round_trips():
    assert torch.spyre.get_downcast_warning() is True
    try:
        torch.spyre.set_downcast_warning(False)
        assert torch.spyre.get_downcast_warning() is False
        torch.spyre.set_downcast_warning(True)
        assert torch.spyre.get_downcast_warning() is True
        with pytest.raises(TypeError, match=r"^set_downcast_warning expects a bool, got 0 of type int$"):
            torch.spyre.set_downcast_warning(0)
    finally:
        torch.spyre.set_downcast_warning(True)


def test_the_downcast_variable_turns_it_off_and_int64_is_never_downcast():
    proc = run_python("""
        import warnings, torch
        print(torch.spyre.get_downcast_warning())
        big = torch.tensor([2**40 + 3, -(2**35)], dtype=torch.int64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.spyre.set_downcast_warning(True)
            back = big.to("spyre").cpu()
        print(back.dtype, back.tolist(), len(caught))
    """, env={"TORCH_SPYRE_DOWNCAST_WARN": "off"})
    assert proc.stdout.splitlines() == ["False", f"torch.int64 {[2**40 + 3, -(2**35)]} 0"]
