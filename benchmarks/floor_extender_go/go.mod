module ascend-npu-k8s/benchmarks/floor_extender_go

go 1.22
