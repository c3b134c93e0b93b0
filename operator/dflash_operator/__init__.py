"""dflash-operator: reconciles DFlashDeployment resources into vLLM pods serving a target model with a DFlash draft."""

__version__ = "0.1.0"
