"""The fault levels of a chip, as Huawei's components write and read them: the agent grades
a fault code into one (``agent.faults.table``), DeviceInfo carries it (``fault_level``,
``fault_handling``) and the scheduler decides from it (``scheduler_core.engine.chip_faults``).
Names and order follow Ascend/mind-cluster component/ascend-device-plugin
pkg/common/fault_code.go and ClusterD's ``normalFaultLevel``."""

from __future__ import annotations

NOT_HANDLE = "NotHandleFault"
RESTART_REQUEST = "RestartRequest"
RESTART_BUSINESS = "RestartBusiness"
FREE_RESTART_NPU = "FreeRestartNPU"
RESTART_NPU = "RestartNPU"
PRE_SEPARATE = "PreSeparateNPU"
SEPARATE = "SeparateNPU"
MANUALLY_SEPARATE = "ManuallySeparateNPU"
SUB_HEALTH = "SubHealthFault"
NORMAL = "NormalNPU"  # no fault: upstream's level of a chip without codes
NORMAL_NETWORK = "NormalNetwork"  # no network fault (ClusterD)

# Most serious first (getMostSeriousFaultType).
SEVERITY = (
    MANUALLY_SEPARATE,
    SEPARATE,
    PRE_SEPARATE,
    RESTART_NPU,
    FREE_RESTART_NPU,
    RESTART_BUSINESS,
    RESTART_REQUEST,
    SUB_HEALTH,
    NOT_HANDLE,
)
LEVELS = frozenset(SEVERITY)  # FaultTypeSet
