"""package_mirror: the cluster's package cache (apt-cacher-ng) and wheelhouse on the cache
host (a delivery role: `gpuctl mirror`, never provision)."""

from gpuctl.components import Component
from gpuctl.knobs import PACKAGE, UNIT, Address, Path, Word

from .validate import package_cache_problems

COMPONENT = Component(
    name="package_mirror", order=0, delivery=True,
    summary="the cluster's package cache",
    validate=(package_cache_problems,),
    knobs={
        "package_mirror_bind_address": Address(),
        "package_mirror_conf_file": Path(("/etc/apt-cacher-ng",)),
        "package_mirror_cache_dir": Path(("/var/cache/apt-cacher-ng", "/srv", "/data"), is_dir=True),
        "package_mirror_packages": PACKAGE,
        "package_mirror_user_ports": Word(r"[1-9][0-9]{0,4}", "port number"),
        "package_mirror_service": UNIT,
        "package_mirror_wheels_dir": Path(("/var/cache/gpuctl-wheels", "/srv", "/data"), is_dir=True),
    },
)
