"""Starting the runtime: a start that fails (a bad TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS, a device
past the visible ones) leaves the process unstarted, and a corrected retry starts. Each test runs
in a process of its own: the runtime starts once per process."""

from conftest import run_python


BAD_HOST_COMPUTE = (
    "TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS='9' is not a valid number of host-compute streams "
    "(expected an integer from 1 to 8; unset, the default is 4)"
)


def test_a_failed_start_leaves_the_process_unstarted_and_a_corrected_retry_starts():
    proc = run_python(
        """
        import os, torch
        from torch_spyre import _C
        for attempt in range(2):
            try:
                torch.spyre.init()
            except RuntimeError as e:
                print("raised:", e)
            print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name,
                  _C._mapped_stream_count())
        try:
            torch.ones(2, device="spyre")
        except RuntimeError as e:
            print("tensor raised:", e)
        os.environ["TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS"] = "2"
        x = torch.ones(2, device="spyre") * 3
        print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name,
              _C._num_host_compute_streams(), x.cpu().tolist())
        print([torch.spyre.host_compute_stream().stream_id for _ in range(3)])
        """,
        env={"TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS": "9"},
    )
    assert proc.stdout.splitlines() == [
        f"raised: {BAD_HOST_COMPUTE}",
        "False NotInitialized 0",
        f"raised: {BAD_HOST_COMPUTE}",
        "False NotInitialized 0",
        f"tensor raised: {BAD_HOST_COMPUTE}",
        "True Ok 2 [3.0, 3.0]",
        "[65, 66, 65]",
    ]


def test_a_start_on_a_device_past_the_visible_ones_binds_nothing():
    proc = run_python(
        """
        import torch
        try:
            torch.spyre.init()
        except RuntimeError as e:
            print("raised:", e)
        print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name)
        torch.spyre.set_device(1)
        torch.spyre.init()
        print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name,
              torch.spyre._C._bound_device())
        """,
        env={"LOCAL_RANK": "2", "FLEX_STUB_CARDS": "2"},
    )
    assert proc.stdout.splitlines() == [
        "raised: Invalid device index 2: out of range for 2 visible Spyre device(s) "
        "(expected an index in [0, 2))",
        "False NotInitialized",
        "True Ok 1",
    ]
