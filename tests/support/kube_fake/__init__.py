"""A faithful fake Kubernetes API server, over real HTTP, with a kubelet that
runs pods as Docker containers. What it models and what it does not:
docs/kubernetes.md, "The fake cluster"."""

from tests.support.kube_fake.cluster import (
    TEST_IMAGE,
    FakeKubeCluster,
    kubectl,
    tag_test_image,
)

__all__ = ["TEST_IMAGE", "FakeKubeCluster", "kubectl", "tag_test_image"]
