"""The kubelet's gRPC contracts the agent speaks: the device-plugin API (``v1beta1``) and the
pod-resources API (``podresources/v1``), as .proto files with upstream's wire names and
numbers and the code generated from them (``python -m deviceplugin_api.generate``)."""
