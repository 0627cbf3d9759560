# gpudock-service NAME: start JupyterLab (jupyter) or TensorBoard (tensorboard)
# in the background unless it runs already. It installs nothing: exit 127 and a
# line naming what is missing when the image lacks the program.
# GPUDOCK_SERVICE_TOKEN: what the proxy presents (JupyterLab's token);
# GPUDOCK_SERVICE_PREFIX: the URL path before the service's name ("/i/<id>/"),
# empty when each service has a host name of its own.
set -u
name="${1:?usage: gpudock-service jupyter|tensorboard}"
state="${HOME:-/root}/.cache/gpudock"
mkdir -p "$state" /root/data
pidfile="$state/$name.pid"
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$name runs already (pid $(cat "$pidfile"))"
    exit 0
fi
prefix="${GPUDOCK_SERVICE_PREFIX:-}"
case "$name" in
jupyter)
    command -v jupyter-lab >/dev/null 2>&1 || {
        echo "missing: jupyter-lab is not on PATH (the jupyterlab Python package)"
        exit 127
    }
    base=/
    [ -n "$prefix" ] && base="${prefix}jupyter/"
    set -- jupyter-lab --no-browser --allow-root --ip=127.0.0.1 --port=8888 \
        --ServerApp.root_dir=/root --ServerApp.base_url="$base" \
        --ServerApp.token="${GPUDOCK_SERVICE_TOKEN:?}" \
        --ServerApp.allow_remote_access=True --ServerApp.allow_origin='*'
    ;;
tensorboard)
    command -v tensorboard >/dev/null 2>&1 || {
        echo "missing: tensorboard is not on PATH (the tensorboard Python package)"
        exit 127
    }
    mkdir -p /root/data/tensorboard
    set -- tensorboard --logdir /root/data/tensorboard --host 127.0.0.1 --port 6006
    [ -n "$prefix" ] && set -- "$@" --path_prefix "${prefix}tensorboard"
    ;;
*)
    echo "unknown service $name: gpudock starts jupyter and tensorboard"
    exit 2
    ;;
esac
cd /root
# setsid + nohup: the process outlives the exec or init that started it.
setsid nohup "$@" >"$state/$name.log" 2>&1 </dev/null &
echo $! >"$pidfile"
echo "started $name (pid $!, log $state/$name.log)"
