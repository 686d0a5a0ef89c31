# tpubot: one image for every process. The Procfile's process types are its commands:
#   web:    tpubot serve    (the default CMD; HTTP /slack/events, /healthz, /readyz, /metrics)
#   worker: tpubot worker   (arq jobs: provisioning, watching, teardown, alerts)
# No secret is baked in: configuration (tokens included) comes from the environment or a tpu.env
# mounted at run time (docker-compose.yml passes tpu.env as env_file). .dockerignore keeps
# tpu.env, .env and the venv out of the build context.
# Pinned to an exact release and distribution, the Python the tests run on: `3.11-slim` moves with
# every patch release and Debian update, so a rebuild would not be the image that was tested.
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY agent ./agent
COPY infra ./infra
RUN pip install . \
    && useradd --create-home --uid 10001 --user-group tpubot

# A non-root user; its home is the working directory, where tpu.env would be read from.
USER tpubot
WORKDIR /home/tpubot

EXPOSE 3000
ENTRYPOINT ["tpubot"]
CMD ["serve"]
