"""Stand-ins for the NVIDIA software and hardware a QEMU lab node lacks (lab only).

- `repo`: the stand-in NVIDIA apt repository generated from the matrices, signed with
  a lab key (`build_repo`, `keyring_info`).
- `kmod`: real kernel modules named nvidia/nvidia_fs/lustre built against the guest
  kernel (`build_modules`).
- `profile`: per-node hardware profiles read by the emulated tools (`write_profile`,
  `push_profile`).
- `faults`: injecting and clearing hardware faults on a node (`inject_fault`,
  `clear_fault`, `FAULTS`).
- ``tools/labhw.py``: the emulated tools themselves (nvidia-smi, dcgmi, nccl-tests …),
  installed on the nodes by the stand-in packages.

See README.md in this directory. Nothing here is imported by roles, deploy code or
product code paths.
"""
