"""The kubelet's gRPC contracts the agent and the DRA driver speak: the device-plugin API
(``v1beta1``), the pod-resources API (``podresources/v1``), plugin registration
(``pluginregistration/v1``), the DRA plugin API (``dra/v1``, ``dra/v1beta1``) and DRA
resource health (``dra_health/v1alpha1``), as .proto files with upstream's wire names and
numbers and the code generated from them (``python -m deviceplugin_api.generate``)."""
