"""Markers for dlbench's command engine: report training steps so that dlbench can time them.

dlbench runs your training command with the case in DLBENCH_* variables and timestamps the
marker lines it prints; it never trusts a time the script reports. Use it from one process (global
rank 0) after the step's device work is finished:

    from dlbench_markers import Case, step, fact, unsupported
    case = Case.from_environment()
    fact("framework", "pytorch"); fact("frameworkVersion", torch.__version__)
    for _ in range(case.total_steps):
        train_step()
        torch.cuda.synchronize()       # the step is over when the device says so
        step(case.global_batch_size)   # "@dlbench step 256"

Plain `print("@dlbench step 256", flush=True)` does the same; this module only spells it out.
"""
import os
import sys

__all__ = ["Case", "step", "fact", "loss", "unsupported"]


def _emit(line):
    # One write per marker, flushed at once: dlbench timestamps the line when it arrives.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def step(samples):
    """One training step finished; `samples` is the step's global sample count (all devices)."""
    samples = int(samples)
    if samples < 1:
        raise ValueError("samples must be >= 1")
    _emit(f"@dlbench step {samples}")


def loss(value):
    """The training loss after the last step reported: dlbench keeps the last one of each repeat
    (the result's lossAfterRepeats) and fails a case whose loss is NaN or infinite (LossNotFinite),
    as for its own engine. Print it after the step's marker, so that reading it is not timed."""
    _emit(f"@dlbench loss {float(value)!r}")  # repr: nan, inf, -inf, or the shortest exact digits


def fact(key, value):
    """Something about the environment: framework, frameworkVersion, backend, gpuModel, ..."""
    value = " ".join(str(value).split())  # one line
    if value:
        _emit(f"@dlbench fact {key} {value}")


def unsupported(why):
    """This case cannot run here; dlbench records it as Failed with reason Unsupported."""
    _emit("@dlbench unsupported " + " ".join(str(why).split()))


class Case:
    """The case dlbench gave this node (the DLBENCH_* variables)."""

    def __init__(self, env):
        def number(name):
            try:
                return int(env[name])
            except KeyError:
                raise SystemExit(f"{name} is not set: run this script through dlbench (dlbench run or the operator)")
            except ValueError:
                raise SystemExit(f"{name}={env[name]!r} is not a whole number")

        self.run = env.get("DLBENCH_RUN", "")
        self.case = env.get("DLBENCH_CASE", "")
        self.model = env.get("DLBENCH_MODEL", "resnet50")
        self.precision = env.get("DLBENCH_PRECISION", "fp32")
        # "224", or "512x1024" (height x width) where the spec sets data.imageHeight and imageWidth.
        size = env.get("DLBENCH_IMAGE_SIZE")
        if size is None:
            raise SystemExit("DLBENCH_IMAGE_SIZE is not set: run this script through dlbench (dlbench run or the operator)")
        sides = size.split("x")
        if len(sides) > 2 or not all(side.isdigit() for side in sides):
            raise SystemExit(f"DLBENCH_IMAGE_SIZE={size!r} is neither a whole number nor HEIGHTxWIDTH")
        self.image_height, self.image_width = int(sides[0]), int(sides[-1])
        self.image_size = self.image_height  # square inputs' side (imagefolder's crops are square)
        self.sequence_length = int(env.get("DLBENCH_SEQUENCE_LENGTH", "0"))  # a sequence model's (bert-base)
        self.nodes = number("DLBENCH_NODES")
        self.node_rank = number("DLBENCH_NODE_RANK")
        self.gpus_per_node = number("DLBENCH_GPUS_PER_NODE")
        self.batch_size = number("DLBENCH_BATCH_SIZE")  # per device
        self.warmup_steps = number("DLBENCH_WARMUP_STEPS")
        self.measure_steps = number("DLBENCH_MEASURE_STEPS")
        self.repeats = number("DLBENCH_REPEATS")
        # spec.optimizer, the model's learning rate at the case's global batch resolved by dlbench.
        self.optimizer = env.get("DLBENCH_OPTIMIZER", "sgd")
        self.learning_rate = float(env.get("DLBENCH_LEARNING_RATE", "0.1"))
        self.momentum = float(env.get("DLBENCH_MOMENTUM", "0.9"))
        self.weight_decay = float(env.get("DLBENCH_WEIGHT_DECAY", "0.0001"))
        # Updates over which the rate rises linearly to learning_rate (0: none).
        self.learning_rate_warmup_steps = int(env.get("DLBENCH_LEARNING_RATE_WARMUP_STEPS", "0"))
        # data.source: synthetic, or imagefolder / cityscapes with its directory and the pipeline's size.
        self.data_source = env.get("DLBENCH_DATA_SOURCE", "synthetic")
        self.data_path = env.get("DLBENCH_DATA_PATH", "")
        self.decode_threads = int(env.get("DLBENCH_DECODE_THREADS", "4"))
        self.prefetch_batches = int(env.get("DLBENCH_PREFETCH_BATCHES", "2"))

    @classmethod
    def from_environment(cls):
        return cls(os.environ)

    @property
    def devices(self):
        return self.nodes * self.gpus_per_node

    @property
    def global_batch_size(self):
        return self.batch_size * self.devices

    @property
    def total_steps(self):
        """Every step dlbench times: repeats x (warm-up + measured), run back to back."""
        return self.repeats * (self.warmup_steps + self.measure_steps)
