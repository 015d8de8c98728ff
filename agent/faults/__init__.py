"""The fault pipeline as Huawei's device plugin has it: fault codes → levels from
``faultCode.json``, escalation by frequency and duration from ``faultCustomization.json``
(both overridable in ``kube-system/mindx-dl-fault-config``), ``ManuallySeparateNPU``,
``UpgradeFaultReason`` and fault Events (Ascend/mind-cluster component/ascend-device-plugin
pkg/common/fault_code.go, upgradefault.go)."""
