"""gpuctl: build a GPU training cluster from bare metal and prove that it works."""

__version__ = "0.1.0"
