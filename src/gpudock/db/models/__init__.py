"""ORM models, one module per domain. The database holds desired state;
reconcilers converge reality to it.

Invariants the schema itself enforces (not the scheduler's good will):
- a GPU is allocated to at most one instance (`gpu_allocations.gpu_id` is the key);
- an instance name is unique among one user's live instances (partial unique index);
- a token hash is unique, and a token name unique among one user's unrevoked tokens.

Every model is importable from here: the modules together are one metadata.
"""

from gpudock.db.models.accounts import (
    ApiTokenModel,
    UserModel,
    UserPasswordModel,
    UserState,
    WebSessionModel,
)
from gpudock.db.models.agents import (
    AgentHostModel,
    AgentHostState,
    JoinTokenModel,
    LinkState,
)
from gpudock.db.models.base import Base, MetaModel, UTCDateTime
from gpudock.db.models.billing import (
    BillingAccountModel,
    BillingIntervalModel,
    BillingMonthTotalModel,
    BillingPostingModel,
    BillingPriceModel,
)
from gpudock.db.models.fleet import (
    GpuAllocationModel,
    GpuDeviceModel,
    GpuEventModel,
    GpuFaultModel,
    GpuShareModel,
    GpuState,
    HostModel,
    MigrationModel,
)
from gpudock.db.models.images import ImageModel
from gpudock.db.models.instances import (
    DesiredState,
    HostLossPolicy,
    InstanceEventModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.db.models.metrics import InstanceSampleModel
from gpudock.db.models.notifications import (
    AutoStopModel,
    DeliveryState,
    EndpointKind,
    GpuWatchModel,
    NotificationDeliveryModel,
    NotificationEndpointModel,
    NotificationModel,
    QueueWaitModel,
)
from gpudock.db.models.services import InstanceServiceModel, ServiceLinkModel
from gpudock.db.models.ssh import (
    SshKeyModel,
    SshSessionModel,
    SshSessionOrigin,
    SshSessionOutcome,
)

__all__ = [
    "AgentHostModel",
    "AgentHostState",
    "ApiTokenModel",
    "AutoStopModel",
    "Base",
    "BillingAccountModel",
    "BillingIntervalModel",
    "BillingMonthTotalModel",
    "BillingPostingModel",
    "BillingPriceModel",
    "DeliveryState",
    "DesiredState",
    "EndpointKind",
    "GpuAllocationModel",
    "GpuDeviceModel",
    "GpuEventModel",
    "GpuFaultModel",
    "GpuShareModel",
    "GpuState",
    "GpuWatchModel",
    "HostLossPolicy",
    "HostModel",
    "ImageModel",
    "InstanceEventModel",
    "InstanceModel",
    "InstanceSampleModel",
    "InstanceServiceModel",
    "InstanceStatus",
    "JoinTokenModel",
    "LinkState",
    "MetaModel",
    "MigrationModel",
    "NotificationDeliveryModel",
    "NotificationEndpointModel",
    "NotificationModel",
    "QueueWaitModel",
    "ServiceLinkModel",
    "SshKeyModel",
    "SshSessionModel",
    "SshSessionOrigin",
    "SshSessionOutcome",
    "UTCDateTime",
    "UserModel",
    "UserPasswordModel",
    "UserState",
    "WebSessionModel",
]
