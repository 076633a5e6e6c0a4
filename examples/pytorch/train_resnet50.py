#!/usr/bin/env python3
"""ResNet-50 v1.5 training in PyTorch, timed by dlbench's command engine.

The script trains torchvision's resnet50 on a fixed random batch (synthetic data, as
tf_cnn_benchmarks and dlbench-worker do) with SGD, for the case dlbench gives it in DLBENCH_*
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

    half = {"amp": torch.float16, "bf16": torch.bfloat16}.get(case.precision)
    scaler = torch.cuda.amp.GradScaler() if case.precision == "amp" else None

    def train_step():
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


if __name__ == "__main__":
    sys.exit(main())
