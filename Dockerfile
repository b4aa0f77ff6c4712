# A Prefect process worker with pearl-pipeline installed, for the `local-process` pool.
#
#   docker build -t pearl-pipeline .
#   docker run --rm -e PREFECT_API_URL=http://<server>:4200/api pearl-pipeline
#
# The `wiki` deployment's pull step changes into $PEARL_PROJECT_DIR as it was when the
# deployment was made, so deploy from the image for runs that land here:
#   docker run --rm -e PREFECT_API_URL=... pearl-pipeline prefect --no-prompt deploy --all
# Mount storage (or give storage_root an object-store URL) to keep the datasets.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PEARL_PROJECT_DIR=/app \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_CLI_PROMPT=false

WORKDIR /app

# WordNet 3.0 database files: the synonym source of token-level positives.
RUN apt-get update && apt-get install -y --no-install-recommends wordnet-base \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first (the layer is reused until the lock changes), exactly as locked.
COPY requirements.lock requirements-data.txt ./
RUN pip install -r requirements.lock \
    && pip install --no-deps -r requirements-data.txt

# The project itself; its dependencies are all in the lock, installed above.
COPY pyproject.toml README.md prefect.yaml ./
COPY flows/ flows/
COPY tasks/ tasks/
COPY storage/ storage/
COPY pearl_model/ pearl_model/
RUN pip install --no-deps -e . \
    && pip check \
    && python -c "import flows.build_corpus, prefect; print('prefect', prefect.__version__)"

# PREFECT_API_URL must be given at `docker run`; the pool is created if it is missing.
CMD ["prefect", "worker", "start", "--pool", "local-process", "--type", "process"]
