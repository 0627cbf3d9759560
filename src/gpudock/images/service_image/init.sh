#!/bin/sh
# The services image's entry point: JupyterLab and TensorBoard, then the
# container's command (gpudock's keep-alive).
for service in jupyter tensorboard; do
    /usr/local/bin/gpudock-service "$service" || true
done
exec "$@"
