#!/usr/bin/env python3
"""ResNet-50 v1.5 training in PyTorch, timed by dlbench's command engine.

The script trains torchvision's resnet50 on a fixed random batch (synthetic data, as
tf_cnn_benchmarks and dlbench-worker do) or, with data.source imagefolder, on torchvision's
ImageFolder through a DataLoader (DLBENCH_DECODE_THREADS worker processes per rank, the same
transforms as dlbench-worker's pipeline, a DistributedSampler per epoch) with SGD, for the case dlbench gives it in DLBENCH_*
variables, and prints "@dlbench step <global samples>" after every step. One command per node:

    python3 train_resnet50.py      # starts DLBENCH_GPUS_PER_NODE processes itself (torch.multiprocessing)
    torchrun --nnodes $DLBENCH_NODES --nproc_per_node $DLBENCH_GPUS_PER_NODE \
             --node_rank $DLBENCH_NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT \
             train_resnet50.py     # or under torchrun, which starts them

Starting its own processes keeps the example independent of torchrun's version: Debian 12's
PyTorch 1.13 on Python 3.11 cannot parse torchrun's default --redirects/--tee ("0").

Distributed: DistributedDataParallel over NCCL on GPUs, gloo on CPUs. Precision: fp32 (TF32 off),
tf32 (CUDA), amp (CUDA: fp16 autocast + GradScaler), bf16 (autocast; on the CPU only where
oneDNN has bfloat16 instructions). What a device cannot run is reported as unsupported.
"""
import os
import sys

import torch
import torch.distributed as dist
import torchvision

from dlbench_markers import Case, fact, step, unsupported


def main():
    case = Case.from_environment()
    if "LOCAL_RANK" not in os.environ and case.gpus_per_node > 1:
        # Not under torchrun: one process per device on this node, ranks numbered node by node.
        torch.multiprocessing.spawn(device_process, args=(case,), nprocs=case.gpus_per_node, join=True)
        return 0
    if "LOCAL_RANK" not in os.environ:
        os.environ.update(LOCAL_RANK="0", RANK=str(case.node_rank), WORLD_SIZE=str(case.devices))
    return train(case)


def device_process(local_rank, case):
    os.environ.update(LOCAL_RANK=str(local_rank), RANK=str(case.node_rank * case.gpus_per_node + local_rank),
                      WORLD_SIZE=str(case.devices))
    train(case)


def train(case):
    world_size = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    reporter = rank == 0

    if world_size != case.devices:
        raise SystemExit(f"{world_size} processes for a case of {case.devices} devices: start one per device "
                         f"(torchrun --nproc_per_node $DLBENCH_GPUS_PER_NODE, or no torchrun at all)")
    if case.precision in ("tf32", "amp") and not cuda:
        if reporter:
            unsupported(f"{case.precision} needs a CUDA device; PyTorch sees none")
        return 0
    if case.precision == "bf16" and not cuda and not torch.backends.mkldnn.is_available():
        if reporter:
            unsupported("bf16 on the CPU needs oneDNN (mkldnn) in this PyTorch build")
        return 0

    if world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = case.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = case.precision == "tf32"

    if reporter:
        fact("framework", "pytorch")
        fact("frameworkVersion", torch.__version__)
        fact("backend", "cuda" if cuda else "cpu")
        fact("communicator", ("nccl" if cuda else "gloo") if world_size > 1 else "none")
        if cuda:
            fact("gpuModel", torch.cuda.get_device_name(device))
            fact("gpuCount", torch.cuda.device_count())
            fact("cudaVersion", torch.version.cuda)
            fact("cudnnVersion", torch.backends.cudnn.version())
        fact("threads", torch.get_num_threads())

    torch.manual_seed(1234 + rank)
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    if world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=case.learning_rate, momentum=case.momentum,
                                weight_decay=case.weight_decay)
    criterion = torch.nn.CrossEntropyLoss()
    images = torch.randn(case.batch_size, 3, case.image_size, case.image_size, device=device)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (case.batch_size,), device=device)
    batches = real_batches(case, rank, world_size, cuda) if case.data_source == "imagefolder" else None
    if reporter:
        fact("dataSource", case.data_source)

    half = {"amp": torch.float16, "bf16": torch.bfloat16}.get(case.precision)
    scaler = torch.cuda.amp.GradScaler() if case.precision == "amp" else None

    def train_step():
        nonlocal images, labels
        if batches is not None:  # the wait for the next batch is part of the step, as in dlbench-worker
            images, labels = next(batches)
            images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        if half is not None:
            with torch.autocast(device_type=device.type, dtype=half):
                loss = criterion(model(images), labels)
        else:
            loss = criterion(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    for _ in range(case.total_steps):
        train_step()
        if cuda:
            torch.cuda.synchronize(device)
        if reporter:
            step(case.global_batch_size)

    if world_size > 1:
        dist.destroy_process_group()
    return 0


class SkippingBrokenFiles(torch.utils.data.Dataset):
    """A file PIL cannot read gives its place to the next one, as in dlbench-worker's pipeline
    (torchvision alone would end the run with the first broken JPEG)."""

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
        raise SystemExit("no file of the data set can be read as an image")


def real_batches(case, rank, world_size, cuda):
    """Endless batches of this rank's shard of the ImageFolder, epoch after epoch."""
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms
    transform = transforms.Compose([transforms.RandomResizedCrop(case.image_size), transforms.RandomHorizontalFlip(),
                                    transforms.ToTensor(),
                                    transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dataset = SkippingBrokenFiles(torchvision.datasets.ImageFolder(case.data_path, transform))
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=42, drop_last=True)
    loader = DataLoader(dataset, batch_size=case.batch_size, sampler=sampler, num_workers=case.decode_threads,
                        prefetch_factor=case.prefetch_batches, persistent_workers=True, pin_memory=cuda,
                        drop_last=True, worker_init_fn=lambda _: torch.set_num_threads(1))
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise SystemExit(f"{case.data_path}: fewer than {case.batch_size} images per rank, no full batch")
        epoch += 1


if __name__ == "__main__":
    sys.exit(main())
