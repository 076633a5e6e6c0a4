"""dlbench-worker's methodology around a PyTorch training step, for bench/'s PyTorch scripts
(pytorch_resnet50.py, pytorch_bert.py): warm up W steps, time M steps between two device
synchronisations, R repeats measured again while they spread (bench/stability.py), then, where
asked, more steps under PyTorch's profiler (bench/pytorch_profile.py).

    add_arguments(parser)                        --warmup, --measure, --repeats, --profile, --max-cv, --extra-repeats
    engine(args)                                 the line's engine, from --compile and --tuned
    measure(step, device, samples_per_step, args) -> the JSON line's fields
"""
import time

import nvml_energy
import pytorch_profile
import stability


def add_arguments(parser):
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--measure", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="after the repeats, this many more steps under PyTorch's profiler, by op kind")
    stability.add_arguments(parser)


def engine(args):
    """The line's engine: "pytorch", with "-compile" and "-tuned" as the script's flags say."""
    return "pytorch" + ("-compile" if args.compile else "") + ("-tuned" if args.tuned else "")


def refusal(args):
    """Why the methodology's arguments, or --compile, cannot run here (None: they can)."""
    for name in ("warmup", "measure", "repeats", "profile"):
        least = 1 if name in ("measure", "repeats") else 0
        if getattr(args, name) < least:
            return f"--{name} {getattr(args, name)}: at least {least}"
    if getattr(args, "compile", False):
        import torch
        if not hasattr(torch, "compile"):
            return f"--compile needs torch.compile, which PyTorch {torch.__version__} lacks"
    return None


def measure(step, device, samples_per_step, args):
    """Runs the methodology over `step()` on `device` (a torch.device) and returns the result's
    fields: stability.measure's (repeats, median, ...), torch, gpu (None on the CPU), on a GPU
    with an energy counter energy_joules (the reported repeats', as the worker's energyJoules)
    and joules_per_sample (else energy_why), and with --profile, profile."""
    import torch  # here, as pytorch_profile: the module loads where torch is not installed

    on_gpu = device.type == "cuda"
    counter, energy_why = nvml_energy.counter_for_torch(torch) if on_gpu else (None, None)
    energies = []  # each repeat's joules over its measured steps, as dlbench-worker reads them

    def synchronize():
        if on_gpu:
            torch.cuda.synchronize()

    def repeat():
        for _ in range(args.warmup):
            step()
        synchronize()
        before = counter.joules() if counter else None
        start = time.perf_counter()
        for _ in range(args.measure):
            step()
        synchronize()
        seconds = time.perf_counter() - start
        after = counter.joules() if counter else None
        energies.append(after - before if before is not None and after is not None and after >= before else None)
        return samples_per_step * args.measure / seconds

    max_cv = stability.DEFAULT_MAX_CV["gpu" if on_gpu else "cpu"] if args.max_cv is None else args.max_cv
    fields = stability.measure(repeat, args.repeats, args.extra_repeats, max_cv)
    fields.update(torch=torch.__version__, gpu=torch.cuda.get_device_name() if on_gpu else None)
    reported = energies[-args.repeats:]
    per_sample = nvml_energy.joules_per_sample(reported, samples_per_step * args.measure)
    if per_sample is not None:
        fields.update(energy_joules=reported, joules_per_sample=per_sample)
    elif on_gpu:
        fields["energy_why"] = energy_why or "a reading failed"
    if args.profile:
        fields["profile"] = pytorch_profile.profile_steps(step, args.profile, device)
    return fields
