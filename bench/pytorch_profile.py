"""Where a PyTorch training step goes, by op kind: the PyTorch side of dlbench-worker's --profile,
so that one GPU call shows which kind of work separates the two (ResNet-50 fp32 on an H200: 0.96x
PyTorch eager, 55 of dlbench's 73 ms in convolutions; PyTorch's own split had never been seen).

On a GPU each kernel's time is charged to the innermost aten op that launched it (PyTorch links a
kernel to the op on top of its stack), so nothing is counted twice; the kernels' own total is kept
beside it, and the largest kernels by name, to show what was left unattributed and which cuDNN
kernels PyTorch chose. On the CPU an op's self time is charged the same way, the ops nested again
by their time ranges (nest_by_time: PyTorch 1.13's own nesting counts some children twice).

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


def innermost_op(event, parent_of=lambda e: e.cpu_parent):
    """The innermost aten op at or above a profiler event, or None (the autograd engine's and
    Python's own record functions); "Optimizer.step: aten::add_" where an optimizer's step ran it."""
    while event is not None and not event.name.startswith("aten::"):
        event = parent_of(event)
    if event is None:
        return None
    ancestor = parent_of(event)
    while ancestor is not None and not ancestor.name.startswith(OPTIMIZER_STEP):
        ancestor = parent_of(ancestor)
    return event.name if ancestor is None else f"{OPTIMIZER_STEP}: {event.name}"


def nest_by_time(events):
    """({id(event): self µs}, {id(event): parent}) for CPU events, nested again by their time ranges on
    each thread. PyTorch 1.13 rounds an op's times to whole microseconds, then leaves a child that
    ends a microsecond after its parent beside it, as its sibling: the parent's self_cpu_time_total
    goes negative and the sibling's counts the child's time again (2% of a ResNet-50 step on the
    CPU). Here a child is what starts inside an event, clipped to it, so self times are never
    negative and sum to the outermost events' time."""
    self_us, parent = {}, {}
    by_thread = {}
    for event in events:
        by_thread.setdefault(getattr(event, "thread", 0), []).append(event)
    for on_thread in by_thread.values():
        on_thread.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
        stack = []  # [event, end (clipped to its parent's), µs of its children]

        def close():
            event, end, children = stack.pop()
            self_us[id(event)] = end - event.time_range.start - children

        for event in on_thread:
            start = event.time_range.start
            while stack and start >= stack[-1][1]:
                close()
            end = event.time_range.end
            if stack:
                end = min(end, stack[-1][1])
                stack[-1][2] += end - start
                parent[id(event)] = stack[-1][0]
            else:
                parent[id(event)] = None
            stack.append([event, end, 0.0])
        while stack:
            close()
    return self_us, parent


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
    host = [e for e in events if not _is_device(e) and not e.is_async]
    if not on_device:
        self_us, parent = nest_by_time(host)
    for event in events:
        if _is_device(event) and on_device:
            seconds = (event.time_range.end - event.time_range.start) * 1e-6
            by_kernel[event.name] = by_kernel.get(event.name, 0.0) + seconds
            kernel_total += seconds
    for event in host:
        if on_device:
            seconds, op = _self_device_us(event) * 1e-6, innermost_op(event)
        else:
            seconds, op = self_us[id(event)] * 1e-6, innermost_op(event, lambda e: parent.get(id(e)))
        if seconds <= 0:
            continue
        op = op or OUTSIDE_OPS
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
