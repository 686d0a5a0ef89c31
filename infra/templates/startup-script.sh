#!/bin/bash
# tpubot startup script: serves @@MODEL_LABEL with vLLM on this Cloud TPU VM.
#
# Rendered by tpubot (infra/startup_script.py); `tpubot render-startup-script` prints exactly this.
# It runs as root at every boot. It holds no secret: the Hugging Face token and the model
# endpoint's API key are read at boot from Secret Manager with this VM's own service-account
# token from the metadata server.
#
# While it boots, the VM publishes what it is doing as guest attributes (metadata server, namespace
# @@BOOT_NAMESPACE; names from infra/boot_phases.py), which the bot reads through the TPU API:
# @@BOOT_PHASE_LIST.
# Only these small non-secret strings go there.
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

readonly GUEST_ATTRIBUTES_URL=@@GUEST_ATTRIBUTES_URL
readonly KEY_PHASE=@@KEY_PHASE KEY_PHASE_SINCE=@@KEY_PHASE_SINCE KEY_LAST_ERROR=@@KEY_LAST_ERROR
readonly KEY_RESTARTS=@@KEY_RESTARTS KEY_CACHE=@@KEY_CACHE
readonly PHASE_SECRETS_FETCHED=@@PHASE_SECRETS_FETCHED PHASE_PULLING_IMAGE=@@PHASE_PULLING_IMAGE
readonly PHASE_LOADING_WEIGHTS=@@PHASE_LOADING_WEIGHTS PHASE_COMPILING=@@PHASE_COMPILING
readonly PHASE_SERVING=@@PHASE_SERVING PHASE_CRASHED=@@PHASE_CRASHED
readonly CACHE_WARM=@@CACHE_WARM CACHE_COLD=@@CACHE_COLD
readonly LAST_ERROR_MAX_CHARS=@@LAST_ERROR_MAX_CHARS
readonly WATCH_INTERVAL_SECONDS=${TPUBOT_WATCH_INTERVAL_SECONDS:-5}
# vLLM's compile cache (/root/.cache/vllm, XLA programs included) lives on this host, one directory
# per cache key: a container restart reuses it instead of compiling for another 15 minutes. The key
# is a hash of everything that makes a cache invalid (image, model and revision, serve flags,
# accelerator type), computed by tpubot when it rendered this script.
readonly CACHE_KEY=@@CACHE_KEY
readonly CACHE_BUCKET=@@CACHE_BUCKET
readonly CACHE_DIR=${STATE_DIR}/vllm-cache/${CACHE_KEY}

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

# publish KEY VALUE: one guest attribute. Best effort: a boot never fails because the bot cannot watch.
publish() {
  curl -sS --max-time 5 -X PUT -H 'Metadata-Flavor: Google' --data-binary "$2" \
    "${GUEST_ATTRIBUTES_URL}/$1" >/dev/null || log "could not publish guest attribute $1"
}

# set_phase PHASE: the boot step now in progress, and when it started (RFC 3339, UTC).
set_phase() {
  publish "${KEY_PHASE_SINCE}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  publish "${KEY_PHASE}" "$1"
  log "phase: $1"
}

# The last error-looking line of the container's log, one line, without anything key-shaped:
# vLLM logs its non-default args (the API key among them) at start, so a fallback to "the last
# line" could otherwise carry a secret into an attribute anyone who can read the node can read.
last_error_line() {
  local lines line
  lines=$(docker logs --tail 200 "${CONTAINER}" 2>&1 || true)
  # A Python traceback ends with its exception line ("AssertionError: …"), which is the one to show.
  line=$(grep -E '(Error|Exception|error:|FAILED|Aborted|Killed)' <<<"${lines}" | tail -n 1 || true)
  if [[ -z "${line}" ]]; then
    line=$(grep -v '^[[:space:]]*$' <<<"${lines}" | tail -n 1 || true)
  fi
  sed -E -e 's/(api[_-]?key[^A-Za-z0-9]+)[^ ,}]+/\1***/Ig' -e 's/hf_[A-Za-z0-9]{8,}/hf_***/g' <<<"${line}" \
    | tr -s '[:space:]' ' ' | sed -E 's/^ //; s/ $//' | cut -c "1-${LAST_ERROR_MAX_CHARS}"
}

# Restore the compile cache from gs://CACHE_BUCKET/CACHE_KEY/ (gcloud storage, which the TPU VM
# images ship with the Cloud SDK, authenticated as this VM's service account), then say whether
# vLLM starts warm. The local directory counts too: a reboot of this VM keeps it.
restore_cache() {
  mkdir -p "${CACHE_DIR}"
  if [[ -n "${CACHE_BUCKET}" && -z "$(ls -A "${CACHE_DIR}")" ]]; then
    if ! command -v gcloud >/dev/null; then
      log "XLA_CACHE_BUCKET is set but this VM has no gcloud (Cloud SDK); compiling cold"
    elif gcloud storage rsync --recursive "gs://${CACHE_BUCKET}/${CACHE_KEY}" "${CACHE_DIR}" >&2; then
      log "restored the compile cache from gs://${CACHE_BUCKET}/${CACHE_KEY}"
    else
      log "no compile cache at gs://${CACHE_BUCKET}/${CACHE_KEY} (or not readable: grant this VM's service account roles/storage.objectViewer on the bucket); compiling cold"
    fi
  fi
  if [[ -n "$(ls -A "${CACHE_DIR}")" ]]; then
    echo "${CACHE_WARM}"
  else
    echo "${CACHE_COLD}"
  fi
}

# Save the cache once, after the first READY of a cold boot (a warm one already came from there).
save_cache() {
  if gcloud storage rsync --recursive "${CACHE_DIR}" "gs://${CACHE_BUCKET}/${CACHE_KEY}" >&2; then
    log "saved the compile cache to gs://${CACHE_BUCKET}/${CACHE_KEY}"
  else
    log "could not save the compile cache to gs://${CACHE_BUCKET}/${CACHE_KEY}: grant this VM's service account roles/storage.objectCreator on the bucket"
  fi
}

# The phase of the container's current run, from its log since it (re)started and /health.
# Heuristic except for serving: vLLM has no fixed wording for "compiling", so this matches the
# lines vLLM and tpu-inference print while they compile ("Compiling …", "Precompile …",
# "Compilation finished …") and not the engine-config line, whose `compilation_config=` comes
# first. Before such a line the run counts as loading weights (download, load, memory profiling);
# a wording it no longer prints only leaves the phase earlier, never wrong about a crash or READY.
run_phase() {
  local started=$1 lines
  if curl -sf --max-time 3 -o /dev/null "http://127.0.0.1:${MODEL_PORT}/health"; then
    echo "${PHASE_SERVING}"
    return
  fi
  lines=$(docker logs --since "${started}" "${CONTAINER}" 2>&1 || true)
  if grep -qiE '(precompil|compiling|compilation (finished|took|done))' <<<"${lines}"; then
    echo "${PHASE_COMPILING}"
  else
    echo "${PHASE_LOADING_WEIGHTS}"
  fi
}

# Follows the container until it is removed: publishes each phase once, and each exit as
# `crashed` with its last error line and the number of exits so far (docker restarts the container).
watch_vllm() {
  local phase=${PHASE_LOADING_WEIGHTS} exits=0 seen_exits=0 state restarts running started now saved=0 cache=$1
  while state=$(docker inspect --format '{{.RestartCount}} {{.State.Running}} {{.State.StartedAt}}' "${CONTAINER}" 2>/dev/null); do
    read -r restarts running started <<<"${state}"
    exits=${restarts}
    if [[ ${running} != true ]]; then
      exits=$((restarts + 1))  # exited and not (yet) restarted
    fi
    if ((exits > seen_exits)); then
      seen_exits=${exits}
      publish "${KEY_LAST_ERROR}" "$(last_error_line)"
      publish "${KEY_RESTARTS}" "${exits}"
      set_phase "${PHASE_CRASHED}"
      phase=${PHASE_CRASHED}
    elif [[ ${running} == true ]]; then
      now=$(run_phase "${started}")
      if [[ ${now} != "${phase}" && ! ( ${phase} == "${PHASE_COMPILING}" && ${now} == "${PHASE_LOADING_WEIGHTS}" ) ]]; then
        set_phase "${now}"
        phase=${now}
      fi
      if [[ ${phase} == "${PHASE_SERVING}" && -n "${CACHE_BUCKET}" && ${cache} == "${CACHE_COLD}" && ${saved} == 0 ]]; then
        saved=1
        save_cache
      fi
    fi
    sleep "${WATCH_INTERVAL_SECONDS}"
  done
  log "container ${CONTAINER} is gone; stopped watching"
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
  set_phase "${PHASE_SECRETS_FETCHED}"
  publish "${KEY_RESTARTS}" 0
  publish "${KEY_LAST_ERROR}" ""
  local cache
  cache=$(restore_cache)
  publish "${KEY_CACHE}" "${cache}"
  set_phase "${PHASE_PULLING_IMAGE}"
  pull_image
  docker rm -f "${CONTAINER}" >/dev/null 2>&1 || true
  # `-e HF_TOKEN -e VLLM_API_KEY` copy the variables from this environment, and `--api-key` is
  # expanded by bash inside the container: neither value appears in any argv on this host.
  # shellcheck disable=SC2016  # ${VLLM_API_KEY} is meant literally here: the container's shell expands it
  docker run --detach --name "${CONTAINER}" --restart unless-stopped \
    --privileged --network host --shm-size 16g \
    -v "${STATE_DIR}/hf-cache:/root/.cache/huggingface" \
    -v "${CACHE_DIR}:/root/.cache/vllm" \
    -e HF_TOKEN -e VLLM_API_KEY \
    --entrypoint /bin/bash \
    "${VLLM_IMAGE}" \
    -c 'exec vllm serve "$@" --api-key "${VLLM_API_KEY}"' vllm "${MODEL_NAME}" "${VLLM_ARGS[@]}"
  unset HF_TOKEN VLLM_API_KEY
  log "vLLM is starting in container ${CONTAINER}: http://$(hostname -I | cut -d' ' -f1):${MODEL_PORT}/v1"
  set_phase "${PHASE_LOADING_WEIGHTS}"
  # The watcher outlives this script (google-startup-scripts.service stops only its main process,
  # KillMode=process); its output goes to a file, not the startup-script log this script owns.
  watch_vllm "${cache}" </dev/null >>"${STATE_DIR}/logs/watch.log" 2>&1 &
  disown
}

main "$@"
