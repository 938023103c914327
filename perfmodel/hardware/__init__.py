"""Hardware catalogue: GPUs, host CPUs and link technologies, each number with a source."""

from perfmodel.hardware.cpus import CPUSpec, get_cpu, list_cpus, read_cpus
from perfmodel.hardware.gpus import GPUSpec, get_gpu, list_gpus, read_gpus
from perfmodel.hardware.links import LinkFamily, LinkTech, get_link, list_links, read_links

__all__ = [
    "CPUSpec",
    "GPUSpec",
    "LinkFamily",
    "LinkTech",
    "get_cpu",
    "get_gpu",
    "get_link",
    "list_cpus",
    "list_gpus",
    "list_links",
    "read_cpus",
    "read_gpus",
    "read_links",
]
