"""Where a PyTorch training step goes, by op kind: the PyTorch side of dlbench-worker's --profile,
so that one GPU call shows which kind of work separates the two (ResNet-50 fp32 on an H200: 0.96x
PyTorch eager, 55 of dlbench's 73 ms in convolutions; PyTorch's own split had never been seen).

On a GPU each kernel's time is charged to the innermost aten op that launched it (PyTorch links a
kernel to the op on top of its stack), so nothing is counted twice; the kernels' own total is kept
beside it, and the largest kernels by name, to show what was left unattributed and which cuDNN
kernels PyTorch chose. On the CPU an op's self time is charged the same way.

    profile_steps(step, steps, device) -> {"steps", "stepSeconds", "timeSource", "attributedSeconds",
                                           "kernelSeconds", "kinds": [...], "ops": [...], "kernels": [...]}
"""
import time

# First match wins: the optimizer's foreach and fused ops name adds and multiplies too, and the ops
# an optimizer's step runs one by one (PyTorch 1.13's SGD on the CPU) are named for it by innermost_op.
OPTIMIZER_STEP = "Optimizer.step"  # PyTorch's record function around every optimizer's step()
KINDS = (
    ("optimizer", (OPTIMIZER_STEP, "aten::_foreach", "aten::_fused", "aten::_amp_", "aten::sgd", "aten::adam")),
    ("convolution", ("conv",)),
    ("batch norm", ("batch_norm",)),
    ("layer norm", ("layer_norm",)),
    ("relu", ("relu", "threshold_backward", "clamp_min")),
    ("pooling", ("pool",)),
    ("linear", ("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear")),
    ("softmax and loss", ("softmax", "nll_loss", "cross_entropy")),
    ("gelu", ("gelu",)),
    ("dropout", ("dropout", "bernoulli")),
    ("embedding", ("embedding",)),
    ("reductions", ("aten::sum", "aten::mean", "aten::norm")),
    ("add", ("aten::add",)),
    ("casts and copies", ("aten::copy_", "aten::_to_copy", "aten::to")),
    ("fill", ("aten::fill_", "aten::zero_", "aten::zeros", "aten::ones")),
)
OUTSIDE_OPS = "outside aten ops"
TOP = 12


def kind_of(op):
    """The kind an aten op's time is summed under ("other" for the rest)."""
    for kind, needles in KINDS:
        if any(needle in op for needle in needles):
            return kind
    return "other"


def innermost_op(event):
    """The innermost aten op at or above a profiler event, or None (the autograd engine's and
    Python's own record functions); "Optimizer.step: aten::add_" where an optimizer's step ran it."""
    while event is not None and not event.name.startswith("aten::"):
        event = event.cpu_parent
    if event is None:
        return None
    ancestor = event.cpu_parent
    while ancestor is not None and not ancestor.name.startswith(OPTIMIZER_STEP):
        ancestor = ancestor.cpu_parent
    return event.name if ancestor is None else f"{OPTIMIZER_STEP}: {event.name}"


def _self_device_us(event):
    # PyTorch 2.x names it device time; 1.13 only CUDA time.
    value = getattr(event, "self_device_time_total", None)
    return value if value is not None else event.self_cuda_time_total


def _is_device(event):
    return event.device_type.name != "CPU"


def charge(events, on_device):
    """(seconds by op, seconds by kernel name, kernels' total): each CPU event's self time (on a
    device: the time of the kernels it launched itself) charged to its innermost aten op."""
    by_op, by_kernel, kernel_total = {}, {}, 0.0
    for event in events:
        if _is_device(event):
            if on_device:
                seconds = (event.time_range.end - event.time_range.start) * 1e-6
                by_kernel[event.name] = by_kernel.get(event.name, 0.0) + seconds
                kernel_total += seconds
            continue
        if event.is_async:
            continue
        seconds = (_self_device_us(event) if on_device else event.self_cpu_time_total) * 1e-6
        if seconds <= 0:
            continue
        op = innermost_op(event) or OUTSIDE_OPS
        by_op[op] = by_op.get(op, 0.0) + seconds
    return by_op, by_kernel, kernel_total


def summarize(by_op, by_kernel, kernel_total, steps, wall_seconds, on_device):
    """The profile document, every time per step, largest first."""
    kinds = {}
    for op, seconds in by_op.items():
        kind = OUTSIDE_OPS if op == OUTSIDE_OPS else kind_of(op)
        kinds[kind] = kinds.get(kind, 0.0) + seconds

    def largest(table, key):
        return [{key: name, "seconds": seconds / steps}
                for name, seconds in sorted(table.items(), key=lambda item: -item[1])]

    return {
        "steps": steps,
        "stepSeconds": wall_seconds / steps,
        "timeSource": "kernels charged to the aten op that launched them" if on_device
                      else "each aten op's self time on the calling thread",
        "attributedSeconds": sum(by_op.values()) / steps,
        "kernelSeconds": kernel_total / steps if on_device else None,
        "kinds": largest(kinds, "kind"),
        "ops": largest(by_op, "op")[:TOP],
        "kernels": largest(by_kernel, "kernel")[:TOP],
    }


def profile_steps(step, steps, device):
    """Runs `step()` `steps` times under PyTorch's profiler (the caller has warmed up) and returns
    where the time went, per step."""
    import torch  # here, so that gpu_check_table.py formats a profile where no torch is installed

    on_device = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_device:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=activities) as profiler:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if on_device:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    by_op, by_kernel, kernel_total = charge(profiler.events(), on_device)
    return summarize(by_op, by_kernel, kernel_total, steps, wall, on_device)


def format_kinds(profile, count=6):
    """One line: the step and its largest kinds in ms, as gpu_check's table prints dlbench's."""
    kinds = ", ".join(f"{k['kind']} {1e3 * k['seconds']:.1f}" for k in profile["kinds"][:count])
    device = profile.get("kernelSeconds")
    charged = f"charged {1e3 * profile['attributedSeconds']:.1f}" + (
        f" of kernels {1e3 * device:.1f}" if device is not None else "")
    return f"step {1e3 * profile['stepSeconds']:.1f} under the profiler, {charged}; {kinds}"
