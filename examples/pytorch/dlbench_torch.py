"""What the PyTorch example scripts share: one process per device, the checks every case needs,
and dlbench-worker's optimizers in torch.optim's terms, so that a spec trains the same way in
PyTorch as in dlbench's own engine and the two engines' figures time the same work.

    launch(train, models)
                       runs train(case, process) once per device of this node: as started by
                       torchrun, or spawning the processes itself (torch.multiprocessing), which
                       keeps the examples independent of torchrun's version (Debian 12's PyTorch
                       1.13 on Python 3.11 cannot parse torchrun's default --redirects/--tee "0").
                       `models` are the DLBENCH_MODEL values the script trains: it states the
                       case's as the fact `model`, and Process.parallel its network's parameter
                       count as `parameters`, which dlbench judges; any other model it reports
                       as unsupported, naming the example that trains it.
    optimizer_for      sgd: torch.optim.SGD(lr, momentum, weight_decay) over every parameter;
                       either optimizer with its rate warmed up linearly over the first
                       DLBENCH_LEARNING_RATE_WARMUP_STEPS applied updates (t / N of it at the t-th,
                       as dlbench-worker; a step GradScaler skipped does not count);
                       adamw: torch.optim.AdamW(lr, betas=(momentum, 0.999), eps=1e-6), weight
                       decay on matrices only (dim >= 2: not biases and norms), after
                       clip_grad_norm_(1.0) (BERT's recipe, and dlbench-worker's:
                       worker/program/case_setup.cpp); lamb: torch.optim has none, so such a case
                       is reported unsupported rather than trained with another optimizer.

    Precision          one training step in the case's precision: fp32 (TF32 off), tf32 (CUDA),
                       amp (CUDA: fp16 autocast + GradScaler), bf16 (autocast; on the CPU only
                       where oneDNN has bfloat16 instructions).
    endless_batches    a sharded DataLoader, epoch after epoch (SkippingUnreadable: a broken
                       file gives its place to the next, as in dlbench-worker's pipeline).

Distributed: DistributedDataParallel over NCCL on GPUs, gloo on CPUs. What a device cannot run is
reported as unsupported.
"""
import os

import torch
import torch.distributed as dist

from dlbench_markers import Case, fact, loss, step, unsupported
from image_classifiers import CLASSIFIERS

__all__ = ["Process", "launch", "Optimizer", "optimizer_for", "why_unsupported", "Precision", "SkippingUnreadable",
           "endless_batches", "batch_source"]


def example_for(model):
    """The example beside this file that trains `model`, or None: for the refusal of a script that
    trains others."""
    if model in CLASSIFIERS:
        return "train_image_classifier.py"
    return {"deeplabv3plus": "train_deeplabv3plus.py", "bert-base": "train_bert.py"}.get(model)


def launch(train, models):
    """Runs `train(case, process)` in one process per device of this node (a module-level
    function: spawned processes find it by name) where the case's model is one of `models`;
    returns the exit code."""
    case = Case.from_environment()
    if "LOCAL_RANK" not in os.environ and case.gpus_per_node > 1:
        # Not under torchrun: one process per device on this node, ranks numbered node by node.
        torch.multiprocessing.spawn(_device_process, args=(train, case, models), nprocs=case.gpus_per_node, join=True)
        return 0
    if "LOCAL_RANK" not in os.environ:
        os.environ.update(LOCAL_RANK="0", RANK=str(case.node_rank), WORLD_SIZE=str(case.devices))
    return _run(train, case, models)


def _device_process(local_rank, train, case, models):
    os.environ.update(LOCAL_RANK=str(local_rank), RANK=str(case.node_rank * case.gpus_per_node + local_rank),
                      WORLD_SIZE=str(case.devices))
    _run(train, case, models)


def _run(train, case, models):
    process = Process(case)
    why = process.why_unsupported(case, models)
    if why:
        if process.reporter:  # one voice for the case
            unsupported(why)
        return 0
    process.start(case)
    try:
        train(case, process)
    finally:
        if process.world_size > 1:
            dist.destroy_process_group()
    return 0


class Process:
    """This process's place in the case: its rank, its device, and whether it speaks for the case."""

    def __init__(self, case):
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", self.local_rank) if self.cuda else torch.device("cpu")
        self.reporter = self.rank == 0
        if self.world_size != case.devices:
            raise SystemExit(f"{self.world_size} processes for a case of {case.devices} devices: start one per device "
                             f"(torchrun --nproc_per_node $DLBENCH_GPUS_PER_NODE, or no torchrun at all)")

    def why_unsupported(self, case, models):
        """Why this case cannot run here, or None."""
        if case.model not in models:
            elsewhere = example_for(case.model)
            return (f"model {case.model}: this script trains {', '.join(models)}"
                    + (f"; {elsewhere} in the same directory trains {case.model}" if elsewhere else ""))
        if case.precision in ("tf32", "amp") and not self.cuda:
            return f"{case.precision} needs a CUDA device; PyTorch sees none"
        if case.precision == "bf16" and not self.cuda and not torch.backends.mkldnn.is_available():
            return "bf16 on the CPU needs oneDNN (mkldnn) in this PyTorch build"
        return why_unsupported(case)

    def start(self, case):
        """Joins the process group, sets the device's math for the precision, and states the facts."""
        if self.world_size > 1:
            dist.init_process_group("nccl" if self.cuda else "gloo")
        if self.cuda:
            torch.cuda.set_device(self.device)
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = case.precision == "tf32"
            torch.backends.cudnn.allow_tf32 = case.precision == "tf32"
        if not self.reporter:
            return
        fact("model", case.model)  # the network train() builds: dlbench judges it against the case
        fact("framework", "pytorch")
        fact("frameworkVersion", torch.__version__)
        fact("backend", "cuda" if self.cuda else "cpu")
        fact("communicator", ("nccl" if self.cuda else "gloo") if self.world_size > 1 else "none")
        if self.cuda:
            fact("gpuModel", torch.cuda.get_device_name(self.device))
            fact("gpuCount", torch.cuda.device_count())
            fact("cudaVersion", torch.version.cuda)
            fact("cudnnVersion", torch.backends.cudnn.version())
        fact("threads", torch.get_num_threads())
        fact("dataSource", case.data_source)

    def parallel(self, model):
        """`model` on every device of the case, its gradients averaged (DistributedDataParallel).
        The process that speaks for the case states the network's trainable parameters, which
        dlbench holds to dlbench-worker's network for the case (the fact `parameters`)."""
        if self.reporter:
            fact("parameters", sum(p.numel() for p in model.parameters() if p.requires_grad))
        if self.world_size == 1:
            return model
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=[self.local_rank] if self.cuda else None)

    def states_input(self, height, width):
        """States the images' size the steps take, height x width as DLBENCH_IMAGE_SIZE spells it
        (the fact `imageSize`, which dlbench judges against the case)."""
        if self.reporter:
            fact("imageSize", f"{int(height)}x{int(width)}")

    def states_sequence_length(self, length):
        """States the tokens per sequence the steps take (the fact `sequenceLength`, which dlbench
        judges against DLBENCH_SEQUENCE_LENGTH)."""
        if self.reporter:
            fact("sequenceLength", int(length))

    def run_steps(self, case, train_step):
        """The case's steps, back to back (`train_step()` returns its loss): each one's marker once
        the device has finished it, and after each repeat's last step its loss, read after the
        marker (untimed, as dlbench-worker reads it)."""
        per_repeat = case.warmup_steps + case.measure_steps
        for done in range(1, case.total_steps + 1):
            last = train_step()
            if self.cuda:
                torch.cuda.synchronize(self.device)  # the step is over when the device says so
            if self.reporter:
                step(case.global_batch_size)
                if done % per_repeat == 0:
                    loss(float(last))


def why_unsupported(case):
    """Why PyTorch cannot train with the case's optimizer, or None."""
    if case.optimizer in ("sgd", "adamw"):
        return None
    return f"optimizer {case.optimizer}: torch.optim has no such optimizer (allowed here: sgd, adamw)"


class Optimizer:
    """The torch optimizer, the global gradient norm to clip to before each step (or None), and the
    updates its rate warms up over (0: none)."""

    def __init__(self, optimizer, max_grad_norm=None, warmup_steps=0):
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self.warmup_steps = warmup_steps
        self.rates = [group["lr"] for group in optimizer.param_groups]
        self.applied = 0  # updates applied so far

    def zero_grad(self):
        self.optimizer.zero_grad(set_to_none=True)

    def report(self):
        """States how this process trains, read back from the torch optimizer (its first group, the
        one that decays), as four facts: dlbench puts them in the result and judges them against
        the spec, as it does dlbench-worker's."""
        group = self.optimizer.param_groups[0]
        adamw = isinstance(self.optimizer, torch.optim.AdamW)
        fact("optimizer", "adamw" if adamw else "sgd")
        fact("learningRate", repr(float(self.rates[0])))  # repr: the shortest text of the same double
        fact("momentum", repr(float(group["betas"][0] if adamw else group["momentum"])))
        fact("weightDecay", repr(float(group["weight_decay"])))
        fact("learningRateWarmupSteps", str(self.warmup_steps))

    def step(self, model, scaler=None):
        """Clips (unscaled gradients, where a GradScaler scaled them) and steps, at the rate warmed
        up to this update."""
        warming = self.applied < self.warmup_steps
        if warming:  # the last warm-up update sets the rate itself
            factor = (self.applied + 1) / self.warmup_steps
            for group, rate in zip(self.optimizer.param_groups, self.rates):
                group["lr"] = rate * factor
        if self.max_grad_norm is not None:
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
        if scaler is not None:
            # A step GradScaler skips backs its scale off; reading the scale waits for the device,
            # so it is read only while the rate warms up.
            before = scaler.get_scale() if warming and scaler.is_enabled() else None
            scaler.step(self.optimizer)
            scaler.update()
            if before is None or scaler.get_scale() >= before:
                self.applied += 1
        else:
            self.optimizer.step()
            self.applied += 1


def optimizer_for(case, model, process):
    """The case's optimizer (DLBENCH_OPTIMIZER and its numbers) for `model`, stated by the process
    that speaks for the case; ValueError where PyTorch has none (ask why_unsupported first)."""
    if case.optimizer == "sgd":
        optimizer = Optimizer(torch.optim.SGD(model.parameters(), lr=case.learning_rate, momentum=case.momentum,
                                              weight_decay=case.weight_decay),
                              warmup_steps=case.learning_rate_warmup_steps)
    elif case.optimizer == "adamw":
        parameters = list(model.parameters())
        groups = [{"params": [p for p in parameters if p.dim() >= 2]},
                  {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}]
        optimizer = Optimizer(torch.optim.AdamW(groups, lr=case.learning_rate, betas=(case.momentum, 0.999),
                                                eps=1e-6, weight_decay=case.weight_decay), max_grad_norm=1.0,
                              warmup_steps=case.learning_rate_warmup_steps)
    else:
        raise ValueError(why_unsupported(case))
    if process.reporter:
        optimizer.report()
    return optimizer


class SkippingUnreadable(torch.utils.data.Dataset):
    """A sample whose file PIL cannot read gives its place to the next one, as in dlbench-worker's
    pipeline (torchvision alone would end the run with the first broken file)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        for attempt in range(len(self.dataset)):
            try:
                return self.dataset[(index + attempt) % len(self.dataset)]
            except OSError:  # PIL's UnidentifiedImageError and truncated files are OSErrors
                continue
        raise SystemExit("no sample of the data set can be read")


def _one_torch_thread(_worker):
    # A DataLoader worker's start, module-level: processes started by spawn (one per device) pickle
    # it, which they cannot do with a lambda.
    torch.set_num_threads(1)


def endless_batches(dataset, case, process):
    """Endless batches of this process's shard of `dataset`, epoch after epoch: a DistributedSampler
    (seed 42, reshuffled each epoch), DLBENCH_DECODE_THREADS loader processes at one torch thread
    each, DLBENCH_PREFETCH_BATCHES batches ahead of the step."""
    from torch.utils.data import DataLoader, DistributedSampler
    sampler = DistributedSampler(dataset, num_replicas=process.world_size, rank=process.rank, shuffle=True, seed=42,
                                 drop_last=True)
    loader = DataLoader(dataset, batch_size=case.batch_size, sampler=sampler, num_workers=case.decode_threads,
                        prefetch_factor=case.prefetch_batches, persistent_workers=True, pin_memory=process.cuda,
                        drop_last=True, worker_init_fn=_one_torch_thread)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise SystemExit(f"{case.data_path}: fewer than {case.batch_size} samples per rank, no full batch")
        epoch += 1


def batch_source(batches, images, labels, device, channels_last):
    """The step's batch as a function: the fixed synthetic (images, labels) where `batches` is None,
    else the data pipeline's next one (the wait for it is part of the step, as in dlbench-worker),
    on `device`, the images in channels-last memory where asked."""
    def next_batch():
        x, y = (images, labels) if batches is None else next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return (x.contiguous(memory_format=torch.channels_last) if channels_last else x), y
    return next_batch


class Precision:
    """One training step in the case's precision: the loss under autocast (fp16 for amp, bf16),
    its backward scaled by a GradScaler for amp, then the update (which skips a step the scaler
    found overflowing). The process that speaks for the case states the precision it set up, read
    back from autocast's type and the backends' TF32 switches (the fact `precision`, which dlbench
    judges against the case)."""

    def __init__(self, case, process):
        self.device_type = process.device.type
        self.half = {"amp": torch.float16, "bf16": torch.bfloat16}.get(case.precision)
        self.scaler = torch.cuda.amp.GradScaler() if case.precision == "amp" else None
        if process.reporter:
            fact("precision", self.trained())

    def trained(self):
        """The precision these steps run in, in the spec's spelling."""
        if self.half is torch.float16:  # with its GradScaler: amp
            return "amp"
        if self.half is torch.bfloat16:
            return "bf16"
        tf32 = (self.device_type == "cuda" and torch.backends.cuda.matmul.allow_tf32
                and torch.backends.cudnn.allow_tf32)
        return "tf32" if tf32 else "fp32"

    def step(self, model, optimizer, compute_loss):
        """compute_loss() is the forward and the loss; returns the loss."""
        optimizer.zero_grad()
        with torch.autocast(device_type=self.device_type, dtype=self.half or torch.bfloat16,
                            enabled=self.half is not None):
            loss = compute_loss()
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        optimizer.step(model, self.scaler)
        return loss
