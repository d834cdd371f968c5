"""Feature GRAPHS: torch.compile(mode="reduce-overhead") spyre graphs: inductor's device check
lets a spyre graph through to spyre's graph policy (torch_spyre/_compile/graphs.py, which checks
the feature first)."""

import torch


def apply_graph_device_check(cudagraph_utils, spyre_policy_active):
    """cudagraph_utils.check_multiple_devices_or_any_cpu_nodes.

    Why: inductor 2.13 gives every device but CUDA a reason to skip graphs; spyre's graph
    policy (config.cudagraph_policy, graphs.py) wraps spyre graphs, but inductor asks this
    check first. Changes: while `spyre_policy_active()` (a policy of the user's may replace
    spyre's after it is installed: then its CUDA graph trees must never see a spyre graph),
    no reason for a graph whose only device is spyre, and a graph with CPU nodes beside
    spyre ones names its CPU node as inductor does without partitions; every other graph
    as before. Retired by: the check asking the registered graph policy (or the device
    interface) whether a device supports graphs."""
    check_devices = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes

    def check_multiple_devices_or_any_cpu_nodes(device_node_mapping):
        devices = {d for d in device_node_mapping if d.type != "meta"}
        if not (any(d.type == "spyre" for d in devices) and spyre_policy_active()):
            return check_devices(device_node_mapping)
        if len(devices) == 1:
            return None
        cpu_node = device_node_mapping.get(torch.device("cpu"))
        if cpu_node is not None:
            message = cudagraph_utils.format_default_skip_message(
                f"cpu device ({cpu_node.name})")
            if stack_trace := cudagraph_utils._get_use_stack_trace(cpu_node):
                message = f"{message}. Found from : \n {stack_trace}"
            return message
        return check_devices(device_node_mapping)

    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = check_multiple_devices_or_any_cpu_nodes
