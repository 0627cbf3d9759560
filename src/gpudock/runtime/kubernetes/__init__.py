"""The Kubernetes runtime (`GPUDOCK_RUNTIME=kubernetes`), one module per kind
of object:

- `api`: the connection, answers as dicts, the client's errors as gpudock's;
- `manifests`: pure: what a spec becomes (pod, claim, namespace, policy) and back;
- `pods`: instance containers as pods, their manifests recorded between runs;
- `claims`: data volumes as PersistentVolumeClaims;
- `tenants`: tenant networks as namespaces with a NetworkPolicy;
- `engine`: `KubernetesRuntime`, composing them.
"""

from gpudock.runtime.kubernetes.engine import KubernetesRuntime

__all__ = ["KubernetesRuntime"]
