# One image for the three components: the node agent and the DRA driver (DaemonSets, run as
# root for the kubelet's socket directories) and the scheduler service (Deployment, runs as
# the non-root user).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
COPY chip_topology ./chip_topology
COPY contract ./contract
COPY deviceplugin_api ./deviceplugin_api
COPY dra_driver ./dra_driver
COPY infra ./infra
COPY scheduler_core ./scheduler_core
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="ascend-npu-k8s" \
      org.opencontainers.image.description="Ascend NPU device-plugin agent, DRA driver and HCCS-affine scheduler extender" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels ascend-npu-k8s==0.1.0 \
    && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin ascend
ENV PYTHONUNBUFFERED=1 GRPC_VERBOSITY=ERROR
USER 10001
EXPOSE 8888
ENTRYPOINT ["python", "-m"]
CMD ["scheduler_core", "serve"]
