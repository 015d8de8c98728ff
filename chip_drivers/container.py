"""How a container is given chips, the same for the device plugin's Allocate answer and the
DRA driver's CDI spec: the Ascend container runtime's environment, or the device nodes."""

from __future__ import annotations

# The driver's shared device nodes a container needs beside its ``/dev/davinci<id>``.
MANAGER_DEVICES = ("/dev/davinci_manager", "/dev/hisi_hdc", "/dev/devmm_svm")
ENV_VISIBLE = "ASCEND_VISIBLE_DEVICES"
ENV_RUNTIME_OPTIONS = "ASCEND_RUNTIME_OPTIONS"
