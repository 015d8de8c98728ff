"""Every annotation, label and ConfigMap key of the wire contract, in one place for the
scheduler and the agent, and the bounded parsers of the values both sides read."""

from __future__ import annotations

from contract.chip_names import ASCEND310, ASCEND310P, NPU, RESOURCE_NAME, InvalidInput, quoted
from contract.vnpu import NPU_CORE_ANNOTATION

# Pod annotations the scheduler and the agent write, and nobody else may (the admission
# policy in daemonset/base/ holds them: keep WRITTEN_BY_US and it in step).
CHIPS_ANNOTATION = RESOURCE_NAME  # the scheduler's chips: Ascend910-4,Ascend910-5
PREDICATE_TIME = "predicate-time"  # UnixNano when scheduled; CONSUMED once allocated
CONSUMED = str(2**64 - 1)  # strconv.FormatUint(math.MaxUint64, 10)
REAL_ANNOTATION = "huawei.com/AscendReal"
KUBELET_ANNOTATION = "huawei.com/kltDev"
RANK_TABLE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
# The 950 family's rank table (Ascend/mind-cluster component/ascend-common/api/default_name.go
# ``PodNPUDeviceAnno``).
NPU_RANK_TABLE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-npu-configuration"
RANK_INDEX_ANNOTATION = "hccl/rankIndex"  # a multi-node job's pod: its rank
SUPER_POD_RANK_ANNOTATION = "super-pod-rank"
SUPER_POD_ID_ANNOTATION = "super-pod-id"
TOR_SHARED_ANNOTATION = "isSharedTor"
TOR_HEALTHY_ANNOTATION = "isHealthy"
TOR_SHARED_IP_ANNOTATION = "sharedTorIp"
# The inference chips' choice (Ascend310-0,Ascend310-1) and the dynamic vNPU's (1-vir02_1c).
CHIPS_310_ANNOTATION = ASCEND310.resource
CHIPS_310P_ANNOTATION = ASCEND310P.resource
CHIPS_NPU_ANNOTATION = NPU.resource  # the 950 family's choice: npu-0,npu-1
# Why the scheduler deletes the pod (a restart's or a failed vNPU's Event reason): written
# just before the deletion, the one mark its admission policy lets it delete an NPU pod by.
DELETING_ANNOTATION = "ascend-npu.io/deleting"
# A fault job's faulty pod placed again on its previous node, for ClusterD (Ascend/mind-cluster
# component/ascend-common/api/consts.go RescheduleInPlaceKey; Volcano's UseAnnotation).
RESCHEDULE_IN_PLACE_ANNOTATION = "reschedule-in-place"
WRITTEN_BY_US = (
    CHIPS_ANNOTATION,
    CHIPS_310_ANNOTATION,
    CHIPS_310P_ANNOTATION,
    CHIPS_NPU_ANNOTATION,
    NPU_CORE_ANNOTATION,
    PREDICATE_TIME,
    REAL_ANNOTATION,
    KUBELET_ANNOTATION,
    RANK_TABLE_ANNOTATION,
    NPU_RANK_TABLE_ANNOTATION,
    RANK_INDEX_ANNOTATION,
    SUPER_POD_RANK_ANNOTATION,
    SUPER_POD_ID_ANNOTATION,
    TOR_SHARED_ANNOTATION,
    TOR_HEALTHY_ANNOTATION,
    TOR_SHARED_IP_ANNOTATION,
    DELETING_ANNOTATION,
    RESCHEDULE_IN_PLACE_ANNOTATION,
)

# What users write on their pods: gangs, network locality, fault rescheduling, product.
GANG_LABEL = "ascend.npu/gang"  # pods of one multi-node job started together
GANG_SIZE_ANNOTATION = "ascend.npu/gang-size"  # how many pods the gang has
TOR_AFFINITY_LABEL = "tor-affinity"
SUPER_POD_AFFINITY_LABEL = "super-pod-affinity"
SP_BLOCK_ANNOTATION = "sp-block"
# MindCluster's handler choice (ascend-for-volcano common/util/constants.go SchedulePolicyAnnoKey)
SCHEDULE_POLICY_ANNOTATION = "huawei.com/schedule_policy"
SP_FIT_ANNOTATION = "sp-fit"  # "idlest": a MindIE job takes the SuperPoDs with most free first
MINDIE_LABELS = ("app", "jobID")  # both set: a MindIE inference job

# On Volcano's scheduler Deployment: the image its containers ran before the Volcano merge set
# the adapter's (JSON {"from": ..., "to": ...}), so that the remove Job puts it back.
SCHEDULER_IMAGE_ANNOTATION = "ascend.npu/vc-scheduler-image"
FAULT_SCHEDULING_LABEL = "fault-scheduling"
FAULT_RETRY_LABEL = "fault-retry-times"  # restarts of the job when one of its pods fails
ACCELERATOR_TYPE_LABEL = "accelerator-type"  # nodeSelector and node label
RING_CONTROLLER_LABEL = "ring-controller.atlas"
VNPU_LEVEL_LABEL = "vnpu-level"  # low (default) or high: the vNPU template's AI CPUs
VNPU_DVPP_LABEL = "vnpu-dvpp"  # yes, no or null (default): the vNPU's media engine
STRATEGY_310_LABEL = "npu-310-strategy"  # card or chip (default): the 310 / 300I Duo handler
DUO_LABEL = "duo"  # "true": a 310P job for Atlas 300I Duo cards
DISTRIBUTED_LABEL = "distributed"  # "true": a 300I Duo chip job taking whole cards
HOST_ARCH_LABEL = "host-arch"
# The marks of an NPU-less role MindCluster's A3 handlers accept in a job (ascend-for-volcano
# ``internal/npu/ascend910/ascend910a3/type.go``: MindSpore's scheduler, as the Ascend Operator
# and Volcano name its task; a role the user takes out of the plugin).
TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"
SCHEDULER_TASK_SPEC = "scheduler"
SKIP_ASCEND_PLUGIN_ANNOTATION = "huawei.com/skip-ascend-plugin"
SKIP_ENABLED = "enabled"

# What a cache keeps of a pod's annotations: those read back. The rank table (kilobytes per
# pod), kltDev and the deletion mark are written, never read; a user's own annotations are
# not ours to hold.
# Of those, what the controller that creates a pod may already write into it: its rank (Huawei's
# Ascend Operator and Volcano's hcclrank job plugin number their pods so). Only at creation.
SET_AT_CREATION = (RANK_INDEX_ANNOTATION,)
# A job's fault silencing, read by ClusterD (and this scheduler) from its PodGroup or, for a
# job of one pod, the pod: ``<code or level>[:seconds],…`` (MindCluster docs api/k8s.md Table 3).
FILTER_CODE_ANNOTATION = "huawei.com/schedule.filter.faultCode"
FILTER_LEVEL_ANNOTATION = "huawei.com/schedule.filter.faultLevel"
# An Atlas 950 SuperPoD job's blocks of one rack and its UB-memory domain
# (ascend-for-volcano common/util/type.go RackAnnoKey, policy/chip8node8ra64sp/const.go).
RA_BLOCK_ANNOTATION = "ra-block"
UB_MEMORY_ANNOTATION = "huawei.com/schedule_ubmemory"
# How a job recovers from a fault (MindCluster docs api/k8s.md; rescheduling.py reads them).
RECOVER_STRATEGY_ANNOTATION = "recover-strategy"
RECOVER_POLICY_PATH_ANNOTATION = "huawei.com/recover_policy_path"
WAIT_RESCHEDULE_ANNOTATION = "wait-reschedule-timeout"
# The annotations that are job settings: read from the job's PodGroup, where Volcano and the
# Ascend Operator copy the job's annotations, else from its pods (ascend-for-volcano
# plugin/job.go getJobAnnotationFromJobInfo: the PodGroup's first, then
# annotationKeysForPodGroup from a pod).
SETTING_ANNOTATIONS = (
    SP_BLOCK_ANNOTATION,
    RA_BLOCK_ANNOTATION,
    SCHEDULE_POLICY_ANNOTATION,
    SP_FIT_ANNOTATION,
    UB_MEMORY_ANNOTATION,
    RECOVER_POLICY_PATH_ANNOTATION,
    RECOVER_STRATEGY_ANNOTATION,
    WAIT_RESCHEDULE_ANNOTATION,
    # ClusterD reads a job's silencing from its PodGroup (custom_filter_fault_processor.go).
    FILTER_CODE_ANNOTATION,
    FILTER_LEVEL_ANNOTATION,
)
KEPT_ANNOTATIONS = (
    frozenset(WRITTEN_BY_US)
    - {RANK_TABLE_ANNOTATION, NPU_RANK_TABLE_ANNOTATION, KUBELET_ANNOTATION, DELETING_ANNOTATION}
) | {
    GANG_SIZE_ANNOTATION,
    TASK_SPEC_ANNOTATION,
    SKIP_ASCEND_PLUGIN_ANNOTATION,
    *SETTING_ANNOTATIONS,
}

# Node labels and annotations.
SUPER_POD_ID_LABEL = "huawei.com/topotree.superpodid"
SERVER_TYPE_LABEL = "servertype"  # the agent sets it when absent: Ascend310P-8
INFER_CARD_TYPE_LABEL = "infer-card-type"  # card-300i-duo: a node of Atlas 300I Duo cards
DUO_CARD_TYPE = "card-300i-duo"

# ConfigMaps besides DeviceInfo (whose codec is contract.deviceinfo): (namespace, name).
TOPOLOGY_CONFIGMAP = ("kube-system", "basic-tor-node-cm")
TOPOLOGY_KEY = "tor_info"
TOR_SHARE_CONFIGMAP = ("volcano-system", "tor-share-cm")
TOR_SHARE_KEY = "global-tor-info"
FAULT_RECORD = ("volcano-system", "vcjob-fault-npu-cm")
FAULT_CONFIG_PREFIX = "fault-config-"  # + the job's name, in its namespace
# On every ConfigMap the scheduler writes: its admission policy lets it replace a job's
# fault-config-<job> only when it carries this (one it made), never a tenant's of that name.
WRITER_LABEL = ("app.kubernetes.io/managed-by", "ascend-npu-scheduler")


MAX_UINT64 = 2**64 - 1
MAX_RANK = 99_999  # ranks of a job of 100,000 nodes
MAX_GANG_SIZE = 100_000


def _decimal(text: str, key: str, digits: int) -> int:
    if not text or len(text) > digits or not text.isascii() or not text.isdigit():
        raise InvalidInput(
            f"{key} {quoted(text)} is not a decimal number of at most {digits} digits"
        )
    return int(text)


def parse_predicate_time(text: str) -> int:
    """``predicate-time``: a decimal uint64 (UnixNano, or CONSUMED)."""
    value = _decimal(text, PREDICATE_TIME, 20)
    if value > MAX_UINT64:
        raise InvalidInput(f"{PREDICATE_TIME} {quoted(text)} is larger than a uint64")
    return value


def parse_rank(text: str) -> int:
    """``hccl/rankIndex``: 0 .. MAX_RANK."""
    value = _decimal(text, RANK_INDEX_ANNOTATION, 5)
    if value > MAX_RANK:
        raise InvalidInput(f"{RANK_INDEX_ANNOTATION} {value} is larger than {MAX_RANK}")
    return value


def parse_gang_size(text: str) -> int:
    """``ascend.npu/gang-size``: 1 .. MAX_GANG_SIZE."""
    value = _decimal(text, GANG_SIZE_ANNOTATION, 6)
    if not 1 <= value <= MAX_GANG_SIZE:
        raise InvalidInput(f"{GANG_SIZE_ANNOTATION} {value} is not in 1..{MAX_GANG_SIZE}")
    return value
