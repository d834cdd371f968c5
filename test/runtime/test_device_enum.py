"""Issue 16: device enumeration as upstream torch-spyre, one bound device per process.

With no variable set every card is visible (FLEX_STUB_CARDS, default 8);
SPYRE_DEVICES lists cards (order kept, duplicates and out-of-range entries
dropped) and wins (SPYRE_VISIBLE_DEVICES, its alias, when it is unset); else
AIU_WORLD_SIZE, else LOCAL_WORLD_SIZE, is a count capped at the card count. The first use binds the current device (set_device, else
LOCAL_RANK, else 0): another visible index is the one-device-per-process error,
an index past the visible ones is out of range. Every case runs in a fresh
interpreter, since the runtime binds once per process.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import run_python

# (environment, expected device_count). 8 cards unless FLEX_STUB_CARDS says otherwise.
ENUMERATION_CASES = [
    ({}, 8),
    ({"FLEX_STUB_CARDS": "3"}, 3),
    ({"SPYRE_DEVICES": "0"}, 1),
    ({"SPYRE_DEVICES": "0,1"}, 2),
    ({"SPYRE_DEVICES": "0,1,1"}, 2),
    ({"SPYRE_DEVICES": "7,7,0,7"}, 2),
    ({"SPYRE_DEVICES": "1,0"}, 2),
    ({"SPYRE_DEVICES": "0, 9"}, 1),
    ({"SPYRE_DEVICES": "0,8"}, 1),
    ({"SPYRE_DEVICES": "8,9,100"}, 0),
    ({"SPYRE_DEVICES": " 3 , 5 ,7"}, 3),
    ({"SPYRE_DEVICES": "0", "AIU_WORLD_SIZE": "2"}, 1),
    ({"SPYRE_DEVICES": "0,1", "AIU_WORLD_SIZE": "2"}, 2),
    ({"SPYRE_DEVICES": "0,1", "AIU_WORLD_SIZE": "5"}, 2),
    ({"AIU_WORLD_SIZE": "1"}, 1),
    ({"AIU_WORLD_SIZE": "3"}, 3),
    ({"AIU_WORLD_SIZE": "8"}, 8),
    ({"AIU_WORLD_SIZE": "9"}, 8),
    ({"AIU_WORLD_SIZE": "100"}, 8),
    ({"AIU_WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2"}, 3),
    ({"LOCAL_WORLD_SIZE": "2"}, 2),
    ({"LOCAL_WORLD_SIZE": "20"}, 8),
    ({"FLEX_STUB_CARDS": "2", "AIU_WORLD_SIZE": "4"}, 2),
    ({"FLEX_STUB_CARDS": "2", "SPYRE_DEVICES": "1,2,3"}, 1),
    ({"FLEX_STUB_CARDS": "12", "SPYRE_DEVICES": "0,11"}, 2),
    # SPYRE_VISIBLE_DEVICES (the name torch's own messages give) is read when SPYRE_DEVICES is unset.
    ({"SPYRE_VISIBLE_DEVICES": "3,1,3"}, 2),
    ({"SPYRE_VISIBLE_DEVICES": "0,9", "AIU_WORLD_SIZE": "5"}, 1),
    ({"SPYRE_VISIBLE_DEVICES": "0,1,2", "SPYRE_DEVICES": "4"}, 1),
]

ENUMERATION_CHILD = """
import torch
print(torch.spyre.device_count(), torch.accelerator.device_count(),
      torch.spyre.is_available(), torch.spyre.is_initialized())
"""


@pytest.fixture(scope="module")
def enumeration_results():
    def one(index):
        return run_python(ENUMERATION_CHILD, env=ENUMERATION_CASES[index][0], check=False)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(len(ENUMERATION_CASES))))


@pytest.mark.parametrize("index", range(len(ENUMERATION_CASES)),
                         ids=[json.dumps(env) for env, _ in ENUMERATION_CASES])
def test_device_enumeration(enumeration_results, index):
    env, expected = ENUMERATION_CASES[index]
    proc = enumeration_results[index]
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    # Counting never starts the runtime; no visible device is "not available".
    assert proc.stdout.split() == [str(expected), str(expected), str(expected > 0), "False"]


@pytest.mark.parametrize(
    "env,message",
    [
        ({"AIU_WORLD_SIZE": "abc"}, "flex: AIU_WORLD_SIZE='abc' is not an integer"),
        ({"AIU_WORLD_SIZE": "0"}, "flex: AIU_WORLD_SIZE='0' is out of range: it must be >= 1"),
        ({"SPYRE_DEVICES": "0,x"},
         "flex: SPYRE_DEVICES='0,x' has a non-integer entry 'x'; expected a comma list of card "
         "indices"),
        ({"SPYRE_VISIBLE_DEVICES": "x"},
         "flex: SPYRE_VISIBLE_DEVICES='x' has a non-integer entry 'x'; expected a comma list of "
         "card indices"),
        ({"LOCAL_WORLD_SIZE": "2x"}, "flex: LOCAL_WORLD_SIZE='2x' is not an integer"),
        ({"FLEX_STUB_CARDS": "many"}, "flex: FLEX_STUB_CARDS='many' is not an integer"),
    ],
)
def test_malformed_enumeration_env_is_a_clear_error(env, message):
    proc = run_python(
        """
        import torch
        assert torch.spyre.is_available() is False
        try:
            torch.spyre.device_count()
        except RuntimeError as e:
            print(e)
        else:
            raise SystemExit("no error")
        """,
        env=env,
    )
    assert proc.stdout == message + "\n"


ONE_DEVICE = (
    "Only one Spyre device per process is supported: this process is bound to spyre:{bound} "
    "but spyre:{requested} was requested (run one process per device, e.g. with torchrun)"
)
OUT_OF_RANGE = (
    "Invalid device index {index}: out of range for {count} visible Spyre device(s) "
    "(expected an index in [0, {count}))"
)

# Every call is tried with the index it names; the child prints
# [label, exception type or "ok", message or result].
USAGE_CHILD = """
import json, torch
s = torch.spyre
out = []
def attempt(label, call):
    try:
        result = call()
        out.append([label, "ok", result])
    except Exception as e:
        out.append([label, type(e).__name__, str(e)])

bound = torch.ones(2, device="spyre")
out.append(["bound", s._C._bound_device(), str(bound.device)])
out.append(["card", s.get_device_properties().card_index])
for i in {indices}:
    attempt(f"properties {{i}}", lambda: s.get_device_properties(i).card_index)
    attempt(f"empty {{i}}", lambda: str(torch.empty(1, device=f"spyre:{{i}}").device))
    attempt(f"to {{i}}", lambda: str(bound.to(f"spyre:{{i}}").device))
    attempt(f"memory_stats {{i}}", lambda: len(s.memory_stats(i)) > 0)
    attempt(f"memory_allocated {{i}}", lambda: s.memory_allocated(i))
    attempt(f"mem_get_info {{i}}", lambda: s.mem_get_info(i)[0] > 0)
    attempt(f"synchronize {{i}}", lambda: s.synchronize(i))
    attempt(f"stream {{i}}", lambda: s.Stream(device=i).device_index)
    attempt(f"capability {{i}}", lambda: s.get_device_capability(i) == s.get_device_capability())
    attempt(f"generator {{i}}", lambda: str(torch.Generator(f"spyre:{{i}}").device))
print(json.dumps(out))
"""


def usage(bound, count, card, indices, env):
    """What USAGE_CHILD prints for a process bound to `bound` of `count` visible devices."""
    proc = run_python(USAGE_CHILD.format(indices=list(indices)), env=env)
    assert proc.stderr == ""
    got = json.loads(proc.stdout)
    expected = [["bound", bound, f"spyre:{bound}"], ["card", card]]
    for i in indices:
        if i == bound:
            rows = [["ok", card], ["ok", f"spyre:{i}"], ["ok", f"spyre:{i}"], ["ok", True],
                    ["ok", 512], ["ok", True], ["ok", None], ["ok", i], ["ok", True],
                    ["ok", f"spyre:{i}"]]
        else:
            refused = (["RuntimeError", ONE_DEVICE.format(bound=bound, requested=i)] if i < count
                       else ["RuntimeError", OUT_OF_RANGE.format(index=i, count=count)])
            # The capability (the dtypes) is any visible device's; a generator is host state.
            capability = ["ok", True] if i < count else refused
            generator = ["ok", f"spyre:{i}"] if i < count else refused
            rows = [refused] * 8 + [capability, generator]
        labels = ["properties", "empty", "to", "memory_stats", "memory_allocated", "mem_get_info",
                  "synchronize", "stream", "capability", "generator"]
        expected += [[f"{label} {i}", *row] for label, row in zip(labels, rows)]
    assert got == expected


def test_no_variable_every_card_is_visible_and_the_process_binds_spyre_0():
    usage(bound=0, count=8, card=0, indices=[0, 1, 7, 8, 20], env={})


def test_local_rank_picks_the_bound_device_of_the_eight():
    usage(bound=5, count=8, card=5, indices=[5, 0, 8], env={"LOCAL_RANK": "5"})


def test_local_rank_indexes_spyre_devices_after_duplicates_and_bad_entries_are_dropped():
    # Visible cards 6, 2, 4 (in that order): logical spyre:1 is card 2.
    usage(bound=1, count=3, card=2, indices=[1, 0, 2, 3],
          env={"SPYRE_DEVICES": "6,2,6,9,4", "LOCAL_RANK": "1"})


def test_spyre_visible_devices_maps_logical_devices_to_cards_like_spyre_devices():
    usage(bound=1, count=3, card=2, indices=[1, 0, 3],
          env={"SPYRE_VISIBLE_DEVICES": "6,2,4", "LOCAL_RANK": "1"})


def test_aiu_world_size_above_the_card_count_binds_the_last_card():
    usage(bound=7, count=8, card=7, indices=[7, 6, 8],
          env={"AIU_WORLD_SIZE": "12", "LOCAL_RANK": "7"})


def test_the_current_device_can_be_any_visible_one_but_only_the_bound_one_is_usable():
    proc = run_python(
        """
        import torch
        s = torch.spyre
        out = [s.device_count()]
        with s.device(6):                      # before the first use: no runtime yet
            out.append([s.current_device(), s.is_initialized()])
        s.set_device(3)
        x = torch.ones(1, device="spyre")      # the first use binds the current device
        out.append([str(x.device), s._C._bound_device(), s.get_device_properties().card_index])
        with s.device(4):
            out.append(s.current_device())     # making it current is allowed ...
            try:
                torch.ones(1, device="spyre")  # ... using it is not
            except RuntimeError as e:
                out.append(str(e))
        out.append(s.current_device())
        for index in (8, 9):
            try:
                s.set_device(index)
            except RuntimeError as e:
                out.append(str(e))
        print(out)
        """
    )
    assert proc.stdout.strip() == str([
        8,
        [6, False],
        ["spyre:3", 3, 3],
        4,
        ONE_DEVICE.format(bound=3, requested=4),
        3,
        OUT_OF_RANGE.format(index=8, count=8),
        OUT_OF_RANGE.format(index=9, count=8),
    ])


def test_local_rank_past_the_visible_devices_fails_at_the_first_use():
    proc = run_python(
        """
        import torch
        print(torch.spyre.device_count(), torch.spyre.current_device())
        try:
            torch.ones(1, device="spyre")
        except RuntimeError as e:
            print(e)
        print(torch.spyre.is_initialized())
        """,
        env={"SPYRE_DEVICES": "1,1,5", "LOCAL_RANK": "2"},
    )
    assert proc.stdout.splitlines() == [
        "2 2",
        "Invalid device index 2: out of range for 2 visible Spyre device(s) (expected an index in [0, 2))",
        "False",
    ]
