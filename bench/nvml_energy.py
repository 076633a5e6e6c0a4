"""A GPU's energy counter through the driver's NVML (libnvidia-ml.so.1), by ctypes: the counter
dlbench-worker reads around each repeat's measured steps (worker/gpu_monitor.cpp:
nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded, Volta and later), for
bench/'s PyTorch scripts, so that both sides' joules per sample come from the same counter.

    counter, why = open_counter(bus_id=None, index=0)   # (None, why) where there is none
    counter.joules()                                    # float, or None where a reading failed
    counter_for_torch(torch)                            # the current CUDA device's, by PCI bus id
    joules_per_sample(energies, samples)                # the median repeat's, as both sides report it
"""
import ctypes
import statistics

SUCCESS = 0


def joules_per_sample(energies, samples):
    """The median of the repeats' joules (a result's energyJoules, or a PyTorch script's readings)
    over the samples each repeat measured; None unless every repeat has its joules."""
    if not energies or any(e is None for e in energies) or samples <= 0:
        return None
    return statistics.median(energies) / samples


class EnergyCounter:
    def __init__(self, library, device):
        self._library = library
        self._device = device

    def joules(self):
        millijoules = ctypes.c_ulonglong(0)
        if self._library.nvmlDeviceGetTotalEnergyConsumption(self._device, ctypes.byref(millijoules)) != SUCCESS:
            return None
        return millijoules.value / 1000.0


def open_counter(bus_id=None, index=0, library="libnvidia-ml.so.1"):
    """The device at PCI `bus_id` ("00000000:3B:00.0"), else at NVML's `index`: (counter, None), or
    (None, why) where NVML, the device or its counter cannot be had."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError as e:
        return None, f"NVML not loaded ({e})"
    if not hasattr(nvml, "nvmlDeviceGetTotalEnergyConsumption"):
        return None, f"{library} has no nvmlDeviceGetTotalEnergyConsumption"
    if nvml.nvmlInit_v2() != SUCCESS:
        return None, "nvmlInit_v2 failed"
    device = ctypes.c_void_p()
    if bus_id is not None:
        found = nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(device))
        where = f"PCI {bus_id}"
    else:
        found = nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(device))
        where = f"index {index}"
    if found != SUCCESS:
        return None, f"no NVML device at {where} (NVML error {found})"
    counter = EnergyCounter(nvml, device)
    if counter.joules() is None:
        return None, f"the GPU at {where} has no energy counter (before Volta, or not exposed)"
    return counter, None


def counter_for_torch(torch):
    """The current CUDA device's counter, found by its PCI bus id where this PyTorch tells it (as
    the worker finds its own), else by index; (None, why) without one."""
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    if all(hasattr(properties, name) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus_id = f"{properties.pci_domain_id:08x}:{properties.pci_bus_id:02x}:{properties.pci_device_id:02x}.0"
        return open_counter(bus_id=bus_id)
    return open_counter(index=torch.cuda.current_device())
