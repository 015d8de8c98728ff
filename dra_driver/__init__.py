"""The DRA driver for Ascend NPUs: a node's chips published as a ResourceSlice (one device per
chip, its HCCS ring an attribute claims constrain on), so the stock kube-scheduler allocates
them; claims prepared for the kubelet (DRA gRPC, CDI specs, a checkpoint); chip health
streamed. The third component beside the device plugin (``agent``) and the extender
(``scheduler_core``); a node runs either this or the device plugin."""
