"""Qwen3NextForCausalLM that declares SupportsEagle3, for vLLM 0.20-0.23.

Those releases give the inner Qwen3NextModel the EagleModelMixin (it can emit auxiliary hidden states) but leave
the interface off the outer class, so the GPU model runner refuses DFlash/EAGLE-3 drafts for Qwen3Next with
"Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested". SupportsEagle3's default
methods delegate to `self.model`, which is all the runner needs. vLLM 0.24 made the same one-line change upstream.

Imported lazily by vLLM's model registry (see plugin.register), never at plugin load.
"""

from vllm.model_executor.models.interfaces import SupportsEagle3
from vllm.model_executor.models.qwen3_next import Qwen3NextForCausalLM as _Upstream


# The name must stay Qwen3NextForCausalLM: vLLM matches architectures and logs by class name.
class Qwen3NextForCausalLM(_Upstream, SupportsEagle3):
    pass
