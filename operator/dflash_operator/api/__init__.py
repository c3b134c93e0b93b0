"""The DFlashDeployment API: models (the single source of the schema) and the CRD generated from them."""

from dflash_operator.api.models import (
    GROUP,
    KIND,
    PLURAL,
    RESERVED_VLLM_FLAGS,
    VERSION,
    DFlashDeployment,
    DFlashDeploymentSpec,
    DFlashDeploymentStatus,
)

__all__ = [
    "GROUP", "KIND", "PLURAL", "RESERVED_VLLM_FLAGS", "VERSION",
    "DFlashDeployment", "DFlashDeploymentSpec", "DFlashDeploymentStatus",
]
