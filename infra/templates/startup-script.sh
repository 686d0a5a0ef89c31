#!/bin/bash
# tpubot startup script: serves @@MODEL_LABEL with vLLM on this Cloud TPU VM.
#
# Rendered by tpubot (infra/startup_script.py); `tpubot render-startup-script` prints exactly this.
# It runs as root at every boot. It holds no secret: the Hugging Face token and the model
# endpoint's API key are read at boot from Secret Manager with this VM's own service-account
# token from the metadata server.
set -euo pipefail

readonly VLLM_IMAGE=@@VLLM_IMAGE
readonly MODEL_NAME=@@MODEL_NAME
readonly MODEL_PORT=@@MODEL_PORT
readonly HF_TOKEN_SECRET=@@HF_TOKEN_SECRET
readonly METADATA_URL=@@METADATA_URL
readonly SECRET_ACCESS_URL=@@SECRET_ACCESS_URL
readonly API_KEY_SECRET=@@API_KEY_SECRET
readonly API_KEY_ACCESS_URL=@@API_KEY_ACCESS_URL
readonly HF_TOKEN_WAIT_SECONDS=@@HF_TOKEN_WAIT_SECONDS
readonly HF_TOKEN_RETRY_SECONDS=@@HF_TOKEN_RETRY_SECONDS
readonly CONTAINER=tpubot-vllm
readonly STATE_DIR=${TPUBOT_STATE_DIR:-/var/lib/tpubot}
VLLM_ARGS=(@@VLLM_ARGS)

log() { echo "tpubot-startup: $*" >&2; }

# fetch_secret VAR ACCESS_URL NAME: reads the secret into the environment variable VAR; returns 1
# if it stayed unreadable. Tracing is switched off inside (and restored after): a secret must never
# reach the serial console or the startup-script log, even when someone debugs this with `bash -x`.
fetch_secret() {
  local var=$1 url=$2 name=$3
  local tracing=0
  case $- in *x*) tracing=1 ;; esac
  set +x
  local deadline=$((SECONDS + HF_TOKEN_WAIT_SECONDS))
  local access_token="" secret=""
  while ((SECONDS < deadline)); do
    if access_token=$(curl -sSf --max-time 10 -H 'Metadata-Flavor: Google' \
          "${METADATA_URL}/instance/service-accounts/default/token" \
          | python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])') \
       && secret=$(printf 'Authorization: Bearer %s\n' "${access_token}" \
          | curl -sSf --max-time 10 -H @- "${url}" \
          | python3 -c 'import base64, json, sys; print(base64.b64decode(json.load(sys.stdin)["payload"]["data"]).decode().strip())') \
       && [[ -n "${secret}" ]]; then
      printf -v "${var}" '%s' "${secret}"
      export "${var?}"
      secret="" access_token=""
      if ((tracing)); then set -x; fi
      return 0
    fi
    log "the secret ${name} is not readable yet; retrying in ${HF_TOKEN_RETRY_SECONDS}s"
    sleep "${HF_TOKEN_RETRY_SECONDS}"
  done
  if ((tracing)); then set -x; fi
  return 1
}

pull_image() {
  local attempt
  for attempt in {1..5}; do
    if docker pull "${VLLM_IMAGE}"; then
      return 0
    fi
    log "docker pull ${VLLM_IMAGE} failed (attempt ${attempt}/5)"
    sleep $((attempt * 10))
  done
  return 1
}

main() {
  mkdir -p "${STATE_DIR}"/{hf-cache,logs}
  local secret
  for secret in "HF_TOKEN ${SECRET_ACCESS_URL} ${HF_TOKEN_SECRET}" "VLLM_API_KEY ${API_KEY_ACCESS_URL} ${API_KEY_SECRET}"; do
    # shellcheck disable=SC2086  # three words by construction: VAR URL NAME, none with spaces
    if ! fetch_secret ${secret}; then
      log "gave up reading ${secret##* } after ${HF_TOKEN_WAIT_SECONDS}s: grant this VM's service account roles/secretmanager.secretAccessor on it"
      exit 1
    fi
  done
  pull_image
  docker rm -f "${CONTAINER}" >/dev/null 2>&1 || true
  # `-e HF_TOKEN -e VLLM_API_KEY` copy the variables from this environment, and `--api-key` is
  # expanded by bash inside the container: neither value appears in any argv on this host.
  # shellcheck disable=SC2016  # ${VLLM_API_KEY} is meant literally here: the container's shell expands it
  docker run --detach --name "${CONTAINER}" --restart unless-stopped \
    --privileged --network host --shm-size 16g \
    -v "${STATE_DIR}/hf-cache:/root/.cache/huggingface" \
    -e HF_TOKEN -e VLLM_API_KEY \
    --entrypoint /bin/bash \
    "${VLLM_IMAGE}" \
    -c 'exec vllm serve "$@" --api-key "${VLLM_API_KEY}"' vllm "${MODEL_NAME}" "${VLLM_ARGS[@]}"
  unset HF_TOKEN VLLM_API_KEY
  log "vLLM is starting in container ${CONTAINER}: http://$(hostname -I | cut -d' ' -f1):${MODEL_PORT}/v1"
}

main "$@"
