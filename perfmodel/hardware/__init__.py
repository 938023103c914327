"""Hardware catalogue: GPU specifications and link technologies, each number with a source."""

from perfmodel.hardware.gpus import GPUSpec, get_gpu, list_gpus
from perfmodel.hardware.links import LinkFamily, LinkTech, get_link, list_links

__all__ = ["GPUSpec", "LinkFamily", "LinkTech", "get_gpu", "get_link", "list_gpus", "list_links"]
