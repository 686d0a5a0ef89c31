#!/bin/bash
# tpubot startup script: serves @@MODEL_LABEL with vLLM on this Cloud TPU VM.
#
# Rendered by tpubot (infra/startup_script.py) for one lease: only the name of the lease's API-key
# secret differs between leases. It runs as root at every boot. It holds no secret: the Hugging Face
# token and the model endpoint's API key are read at boot from Secret Manager with this VM's own
# service-account token from the metadata server, and handed to the container through its
# environment (vLLM reads VLLM_API_KEY itself), so neither is in any process's argv.
#
# Every step says what it is doing as guest attributes (metadata server, namespace @@BOOT_NAMESPACE;
# names from infra/boot_phases.py), which the bot reads through the TPU API: @@BOOT_PHASE_LIST.
# A step that keeps retrying publishes why (`last-error`) at each try; a step that gives up
# publishes `failed` with its error line and exits: the bot fails the lease at once on it. Only
# these small non-secret strings go there.
set -euo pipefail

# Where Google is: the one place this script takes its endpoints from. The metadata server is at
# GCE_METADATA_HOST when that is set (the variable Google's client libraries honour; nothing sets it
# on a TPU VM), else metadata.google.internal; the APIs are tpubot's settings (Google's by default).
readonly METADATA_URL="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1"
readonly SECRET_MANAGER_URL=@@SECRET_MANAGER_URL
readonly STORAGE_URL=@@STORAGE_URL

readonly VLLM_IMAGE=@@VLLM_IMAGE
readonly MODEL_NAME=@@MODEL_NAME
readonly MODEL_PORT=@@MODEL_PORT
readonly HF_TOKEN_SECRET=@@HF_TOKEN_SECRET
readonly API_KEY_SECRET=@@API_KEY_SECRET
readonly CONTAINER=tpubot-vllm
readonly STATE_DIR=${TPUBOT_STATE_DIR:-/var/lib/tpubot}
VLLM_ARGS=(@@VLLM_ARGS)

# How long each step before vLLM may wait: every call has a time limit, every retry a count and a
# pause. Together they stay inside the bot's MODEL_BOOT_TIMEOUT (infra/startup_script.py adds them
# up, and the README quotes the sum), so a VM that cannot start vLLM says why before the bot gives up.
readonly METADATA_SECONDS=@@METADATA_SECONDS  # one metadata-server call (link-local: it answers in ms)
readonly API_SECONDS=@@API_SECONDS  # one Secret Manager call
readonly CACHE_TRANSFER_SECONDS=@@CACHE_TRANSFER_SECONDS  # the compile cache's download (or upload)
readonly DOCKER_SECONDS=@@DOCKER_SECONDS  # one docker run/rm/logs/inspect: a daemon that hangs must not hang us
readonly SECRET_RETRY_SECONDS=@@SECRET_RETRY_SECONDS
# 403 on the lease's key: the bot granted it moments before the VM existed, and an IAM grant takes up
# to about 7 minutes to reach Secret Manager; 403 on the HF token: the operator's grant, checked by doctor.
readonly KEY_DENIED_TRIES=@@KEY_DENIED_TRIES
readonly SECRET_DENIED_TRIES=@@SECRET_DENIED_TRIES
readonly SECRET_MISSING_TRIES=@@SECRET_MISSING_TRIES  # 404: waiting does not create a secret
readonly SECRET_TRIES=@@SECRET_TRIES  # anything else: the service or the network may come back
readonly PULL_TRIES=@@PULL_TRIES
readonly PULL_RETRY_SECONDS=@@PULL_RETRY_SECONDS
readonly PULL_RATE_LIMIT_SECONDS=@@PULL_RATE_LIMIT_SECONDS  # doubled at each rate-limited try
readonly PULL_BUDGET_SECONDS=@@PULL_BUDGET_SECONDS  # the whole pull: every try and every pause

readonly GUEST_ATTRIBUTES_URL="${METADATA_URL}/instance/guest-attributes/@@BOOT_NAMESPACE"
readonly KEY_PHASE=@@KEY_PHASE KEY_PHASE_SINCE=@@KEY_PHASE_SINCE KEY_LAST_ERROR=@@KEY_LAST_ERROR
readonly KEY_RESTARTS=@@KEY_RESTARTS KEY_CACHE=@@KEY_CACHE KEY_CACHE_NOTE=@@KEY_CACHE_NOTE
readonly PHASE_READING_SECRETS=@@PHASE_READING_SECRETS PHASE_PULLING_IMAGE=@@PHASE_PULLING_IMAGE
readonly PHASE_RESTORING_CACHE=@@PHASE_RESTORING_CACHE PHASE_LOADING_WEIGHTS=@@PHASE_LOADING_WEIGHTS
readonly PHASE_COMPILING=@@PHASE_COMPILING PHASE_SERVING=@@PHASE_SERVING PHASE_CRASHED=@@PHASE_CRASHED
readonly PHASE_FAILED=@@PHASE_FAILED
readonly CACHE_WARM=@@CACHE_WARM CACHE_COLD=@@CACHE_COLD CACHE_OFF=@@CACHE_OFF
readonly LAST_ERROR_MAX_CHARS=@@LAST_ERROR_MAX_CHARS
readonly WATCH_INTERVAL_SECONDS=${TPUBOT_WATCH_INTERVAL_SECONDS:-5}
# vLLM's compile cache (/root/.cache/vllm, XLA programs included) lives on this host, one directory
# per cache key: a container restart reuses it instead of compiling for another 15 minutes. The key
# is a hash of everything that makes a cache invalid (image, model and revision, serve flags,
# accelerator type), computed by tpubot when it rendered this script. With a bucket it is kept there
# too, as one object per key, through the Storage JSON API (no Cloud SDK needed on the VM).
readonly CACHE_KEY=@@CACHE_KEY
readonly CACHE_BUCKET=@@CACHE_BUCKET
readonly CACHE_DIR=${STATE_DIR}/vllm-cache/${CACHE_KEY}
readonly CACHE_OBJECT=${CACHE_KEY}/vllm-cache.tar

log() { echo "tpubot-startup: $*" >&2; }

one_line() { tr -s '[:space:]' ' ' | sed -E 's/^ //; s/ $//' | cut -c "1-${LAST_ERROR_MAX_CHARS}"; }

# publish KEY VALUE: one guest attribute. A refused write (guest attributes turned off by the org
# policy compute.disableGuestAttributesAccess, or by the instance metadata) is logged, never fatal:
# the bot then says it hears nothing from this VM.
publish() {
  local status
  status=$(curl -sS --connect-timeout 2 --max-time "${METADATA_SECONDS}" -o /dev/null -w '%{http_code}' -X PUT -H 'Metadata-Flavor: Google' \
    --data-binary "$2" "${GUEST_ATTRIBUTES_URL}/$1" 2>/dev/null) || status=000
  if [[ ${status} != 200 ]]; then
    log "could not publish guest attribute $1 (HTTP ${status}): is the org policy compute.disableGuestAttributesAccess on?"
  fi
}

# set_phase PHASE: the boot step now in progress, and when it started (RFC 3339, UTC).
set_phase() {
  publish "${KEY_PHASE_SINCE}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  publish "${KEY_PHASE}" "$1"
  log "phase: $1"
}

# retrying MESSAGE: why the current step is trying again (the card shows it while the step goes on).
retrying() {
  publish "${KEY_LAST_ERROR}" "$(one_line <<<"$1")"
  log "$1"
}

# fail MESSAGE: this boot cannot go on. Says so (phase `failed` and the error line) and exits.
fail() {
  local line
  line=$(one_line <<<"$1")
  publish "${KEY_LAST_ERROR}" "${line}"
  set_phase "${PHASE_FAILED}"
  log "gave up: ${line}"
  exit 1
}

# The account this VM runs as (its metadata), for error lines: a grant names it. Asked once.
ACCOUNT=""
service_account() {
  if [[ -z ${ACCOUNT} ]]; then
    ACCOUNT=$(curl -sSf --connect-timeout 2 --max-time "${METADATA_SECONDS}" -H 'Metadata-Flavor: Google' \
              "${METADATA_URL}/instance/service-accounts/default/email" 2>/dev/null) || ACCOUNT=""
  fi
  echo "${ACCOUNT:-"this VM's service account"}"
}

# json_string JSON NAME: the value of the first `"NAME": "…"` in JSON (Google's answers are flat
# enough for this; a bash match, no process), JSON escapes other than \" and \\ left as they are.
json_string() {
  local pattern="\"$2\"[[:space:]]*:[[:space:]]*\"(([^\"\\\\]|\\\\.)*)\""
  if [[ $1 =~ $pattern ]]; then
    local value=${BASH_REMATCH[1]}
    value=${value//\\\"/\"}
    printf '%s' "${value//\\\\/\\}"
  fi
}

# access_token: this VM's OAuth token, from the metadata server ("" when it gives none). Whoever
# holds it in a variable turns tracing off first (`local -; set +x`): `bash -x` prints assignments
# and builtins' arguments, and the serial console and the journal keep what it prints.
access_token() {
  local -
  set +x
  json_string "$(curl -sSf --connect-timeout 2 --max-time "${METADATA_SECONDS}" -H 'Metadata-Flavor: Google' \
      "${METADATA_URL}/instance/service-accounts/default/token" 2>/dev/null || true)" access_token
}

# google_call METHOD URL [curl args…]: one call with this VM's own token, at most API_SECONDS (a
# later --max-time among the curl args wins). Prints the response body then, on a line of its own,
# the HTTP status (000: no answer). The token goes to curl through stdin, never argv nor a trace.
google_call() {
  local -
  set +x
  local method=$1 url=$2 token=""
  shift 2
  token=$(access_token)
  if [[ -z ${token} ]]; then
    printf '{"error": {"message": "the metadata server gave no access token"}}\n000'
    return
  fi
  printf 'Authorization: Bearer %s\n' "${token}" \
    | curl -sS --connect-timeout 5 --max-time "${API_SECONDS}" -X "${method}" -H @- -w '\n%{http_code}' "$@" \
        "${url}" 2>/dev/null \
    || printf '\n000'
}

# google_error STATUS BODY: "HTTP 403 PERMISSION_DENIED: <Google's message>", one line.
google_error() {
  local status message detail
  status=$(json_string "$2" status)
  message=$(json_string "$2" message)
  detail=${status}${status:+${message:+: }}${message}
  if [[ $1 == 000 ]]; then
    echo "no answer${detail:+: ${detail}}"
  else
    echo "HTTP $1${detail:+ ${detail}}"
  fi
}

# fetch_secret VAR NAME DENIED_TRIES: reads the secret's latest version into the environment
# variable VAR, or fails the boot. A 403 is tried DENIED_TRIES times (a grant takes minutes to reach
# Secret Manager), a 404 SECRET_MISSING_TRIES, anything else SECRET_TRIES. Tracing is off inside
# (restored on return): a secret must never reach the serial console or the log, even under `bash -x`.
fetch_secret() {
  local -
  set +x
  local var=$1 name=$2 denied_tries=$3
  local try tries response status body secret why
  for ((try = 1; ; try++)); do
    response=$(google_call GET "${SECRET_MANAGER_URL}/v1/${name}:access")
    status=${response##*$'\n'} body=${response%$'\n'*} response=""
    if [[ ${status} == 200 ]] && secret=$(json_string "${body}" data | base64 -d 2>/dev/null) \
       && [[ -n ${secret} ]]; then
      printf -v "${var}" '%s' "${secret}"
      export "${var?}"
      secret="" body=""
      return 0
    fi
    if [[ ${status} == 200 ]]; then
      why="reading secret ${name} as $(service_account): its latest version is empty"
    else
      why="reading secret ${name} as $(service_account): $(google_error "${status}" "${body}")"
    fi
    body=""
    case ${status} in
      403) tries=${denied_tries} ;;
      404) tries=${SECRET_MISSING_TRIES} ;;
      *) tries=${SECRET_TRIES} ;;
    esac
    if ((try >= tries)); then
      fail "${why} (gave up after ${try} tries)"
    fi
    retrying "${why} (try ${try} of ${tries}; again in ${SECRET_RETRY_SECONDS}s)"
    sleep "${SECRET_RETRY_SECONDS}"
  done
}

# registry_login: an Artifact Registry image (HOST is REGION-docker.pkg.dev) is private unless its
# repository says otherwise, and the Docker daemon sends no Google credentials of its own: log it in
# as Google documents for an access token (user oauth2accesstoken, the token on stdin, never argv).
registry_login() {
  local -
  set +x
  local host=${VLLM_IMAGE%%/*} token output
  [[ ${host} == *-docker.pkg.dev ]] || return 0
  token=$(access_token)
  if [[ -z ${token} ]]; then
    fail "docker login ${host}: the metadata server gave no access token for $(service_account)"
  fi
  if ! output=$(printf '%s' "${token}" | timeout "${API_SECONDS}" docker login -u oauth2accesstoken \
        --password-stdin "https://${host}" 2>&1); then
    fail "docker login ${host} as $(service_account): $(tail -n 1 <<<"${output}")"
  fi
}

# pull_image: `docker pull`, retried, all of it within PULL_BUDGET_SECONDS of this VM's clock (each
# try runs under `timeout` for what is left). Docker Hub's rate limit (toomanyrequests: 10 anonymous
# pulls an hour per address, and every node behind one Cloud NAT shares its address) backs off for
# minutes; an image that does not exist, a refused registry or a full disk fail at once.
pull_image() {
  local try output line left code wait=${PULL_RATE_LIMIT_SECONDS} deadline=$((SECONDS + PULL_BUDGET_SECONDS))
  registry_login
  for ((try = 1; ; try++)); do
    left=$((deadline - SECONDS))
    if ((left <= 0)); then  # `timeout 0` would not time out at all
      fail "docker pull ${VLLM_IMAGE}: not done in ${PULL_BUDGET_SECONDS}s (gave up after $((try - 1)) tries)"
    fi
    code=0
    output=$(timeout "${left}" docker pull "${VLLM_IMAGE}" 2>&1) || code=$?
    if ((code == 0)); then
      return 0
    fi
    if ((code == 124)); then
      fail "docker pull ${VLLM_IMAGE}: not done in ${PULL_BUDGET_SECONDS}s (try ${try}): is the registry reachable, and fast enough for an image of 20-26 GB?"
    fi
    line=$(grep -E '(Error|error|denied|unauthorized|toomanyrequests|no space left)' <<<"${output}" | tail -n 1 || true)
    line=${line:-$(tail -n 1 <<<"${output}")}
    case ${line} in
      *"manifest unknown"* | *"not found"* | *"no space left on device"* | *unauthorized* | *denied*)
        fail "docker pull ${VLLM_IMAGE}: ${line}" ;;
    esac
    if ((try >= PULL_TRIES)); then
      fail "docker pull ${VLLM_IMAGE}: ${line} (gave up after ${try} tries)"
    fi
    local pause=$((try * PULL_RETRY_SECONDS))
    if [[ ${line} == *toomanyrequests* ]]; then
      pause=${wait}
      wait=$((wait * 2))
    fi
    if ((SECONDS + pause >= deadline)); then
      fail "docker pull ${VLLM_IMAGE}: ${line} (gave up after ${try} tries: another would pass the pull's ${PULL_BUDGET_SECONDS}s)"
    fi
    retrying "docker pull ${VLLM_IMAGE}: ${line} (try ${try} of ${PULL_TRIES}; again in ${pause}s)"
    sleep "${pause}"
  done
}

# The last error-looking line of the container's log, one line, without anything key-shaped:
# vLLM logs its non-default args at start, so a fallback to "the last line" could otherwise carry
# a secret into an attribute anyone who can read the node can read.
last_error_line() {
  local lines line
  lines=$(timeout "${DOCKER_SECONDS}" docker logs --tail 200 "${CONTAINER}" 2>&1 || true)
  # A Python traceback ends with its exception line ("AssertionError: …"), which is the one to show.
  line=$(grep -E '(Error|Exception|error:|FAILED|Aborted|Killed)' <<<"${lines}" | tail -n 1 || true)
  if [[ -z "${line}" ]]; then
    line=$(grep -v '^[[:space:]]*$' <<<"${lines}" | tail -n 1 || true)
  fi
  sed -E -e 's/(api[_-]?key[^A-Za-z0-9]+)[^ ,}]+/\1***/Ig' -e 's/hf_[A-Za-z0-9]{8,}/hf_***/g' <<<"${line}" | one_line
}

# Restore the compile cache from gs://CACHE_BUCKET/CACHE_OBJECT (Storage JSON API, this VM's
# token), then say whether vLLM starts warm, cold or without a bucket cache, and why. The local
# directory counts too: a reboot of this VM keeps it.
restore_cache() {
  mkdir -p "${CACHE_DIR}"
  local archive status where="gs://${CACHE_BUCKET}/${CACHE_OBJECT}"
  if [[ -n "$(ls -A "${CACHE_DIR}")" ]]; then
    publish "${KEY_CACHE_NOTE}" "kept on this VM from an earlier boot"
    echo "${CACHE_WARM}"
    return
  fi
  if [[ -z ${CACHE_BUCKET} ]]; then
    publish "${KEY_CACHE_NOTE}" "XLA_CACHE_BUCKET is not set: every lease compiles from scratch"
    echo "${CACHE_OFF}"
    return
  fi
  set_phase "${PHASE_RESTORING_CACHE}"
  archive=$(mktemp "${STATE_DIR}/cache.XXXXXX")
  status=$(google_call GET "${STORAGE_URL}/storage/v1/b/${CACHE_BUCKET}/o/${CACHE_OBJECT//\//%2F}?alt=media" \
           -o "${archive}" --max-time "${CACHE_TRANSFER_SECONDS}" | tail -n 1)
  if [[ ${status} == 200 ]] && tar -xf "${archive}" -C "${CACHE_DIR}"; then
    rm -f "${archive}"
    publish "${KEY_CACHE_NOTE}" "restored from ${where}"
    echo "${CACHE_WARM}"
    return
  fi
  local body
  body=$(head -c 2000 "${archive}" 2>/dev/null || true)
  rm -f "${archive}"
  case ${status} in
    404) publish "${KEY_CACHE_NOTE}" "no cache at ${where} yet: this boot compiles and saves it"
         echo "${CACHE_COLD}" ;;
    403) publish "${KEY_CACHE_NOTE}" "${where} is not readable as $(service_account) (HTTP 403): grant it roles/storage.objectUser on gs://${CACHE_BUCKET}"
         echo "${CACHE_OFF}" ;;
    *) publish "${KEY_CACHE_NOTE}" "$(one_line <<<"could not read ${where} ($(google_error "${status}" "${body}")): compiling from scratch")"
       echo "${CACHE_COLD}" ;;
  esac
}

# Save the cache once, after the first READY of a boot that did not restore it. It runs in the
# watcher, where `set -e` would end the watching at the first failed command: every step is checked
# instead, and a failure is published as the cache note (and returned), never fatal.
save_cache() {
  local archive="" status body error where="gs://${CACHE_BUCKET}/${CACHE_OBJECT}"
  if ! archive=$(mktemp "${STATE_DIR}/cache.XXXXXX" 2>&1) || ! error=$(tar -cf "${archive}" -C "${CACHE_DIR}" . 2>&1); then
    [[ -f ${archive} ]] && rm -f "${archive}"
    publish "${KEY_CACHE_NOTE}" "$(one_line <<<"not saved to ${where}: packing ${CACHE_DIR} failed: ${error:-${archive}}")"
    return 1
  fi
  body=$(google_call POST "${STORAGE_URL}/upload/storage/v1/b/${CACHE_BUCKET}/o?uploadType=media&name=${CACHE_OBJECT}" \
         -H 'Content-Type: application/x-tar' --data-binary "@${archive}" --max-time "${CACHE_TRANSFER_SECONDS}")
  rm -f "${archive}"
  status=${body##*$'\n'} body=${body%$'\n'*}
  if [[ ${status} == 200 ]]; then
    publish "${KEY_CACHE_NOTE}" "saved to ${where} for the next lease"
    return 0
  fi
  if [[ ${status} == 403 ]]; then
    publish "${KEY_CACHE_NOTE}" "$(one_line <<<"not saved to ${where} as $(service_account) (HTTP 403): grant it roles/storage.objectUser on gs://${CACHE_BUCKET}")"
  else
    publish "${KEY_CACHE_NOTE}" "$(one_line <<<"not saved to ${where} ($(google_error "${status}" "${body}"))")"
  fi
  return 1
}

# The phase of the container's current run, from its log since it (re)started and /health.
# Heuristic except for serving: vLLM has no fixed wording for "compiling", so this matches the
# lines vLLM and tpu-inference print while they compile ("Compiling …", "Precompile …",
# "Compilation finished …") and not the engine-config line, whose `compilation_config=` comes
# first. Before such a line the run counts as loading weights (download, load, memory profiling);
# a wording it no longer prints only leaves the phase earlier, never wrong about a crash or READY.
run_phase() {
  local started=$1 address=$2 phase=$3 lines
  if curl -sf --connect-timeout 2 --max-time 3 -o /dev/null "http://${address}:${MODEL_PORT}/health"; then
    echo "${PHASE_SERVING}"
    return
  fi
  if [[ ${phase} == "${PHASE_COMPILING}" ]]; then
    echo "${PHASE_COMPILING}"  # a run that compiles goes on compiling until it serves (or exits)
    return
  fi
  lines=$(timeout "${DOCKER_SECONDS}" docker logs --since "${started}" "${CONTAINER}" 2>&1 || true)
  if grep -qiE '(precompil|compiling|compilation (finished|took|done))' <<<"${lines}"; then
    echo "${PHASE_COMPILING}"
  else
    echo "${PHASE_LOADING_WEIGHTS}"
  fi
}

# Follows the container until it is removed: publishes each phase once, and each exit as
# `crashed` with its last error line and the number of exits so far (docker restarts the container).
# Once a run serves, only an exit changes anything: only `docker inspect` is asked, six times less often.
watch_vllm() {
  local cache=$1 address=$2 phase=${PHASE_LOADING_WEIGHTS} exits=0 seen_exits=0 state restarts running started now
  local saved=0 code
  while :; do
    code=0
    state=$(timeout "${DOCKER_SECONDS}" docker inspect --format '{{.RestartCount}} {{.State.Running}} {{.State.StartedAt}}' \
            "${CONTAINER}" 2>/dev/null) || code=$?
    if ((code == 124)); then  # a slow daemon is not a container that is gone: ask again
      log "docker inspect ${CONTAINER}: no answer in ${DOCKER_SECONDS}s; asking again"
      sleep "${WATCH_INTERVAL_SECONDS}"
      continue
    fi
    ((code == 0)) || break
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
    elif [[ ${running} == true && ${phase} != "${PHASE_SERVING}" ]]; then
      now=$(run_phase "${started}" "${address}" "${phase}")
      if [[ ${now} != "${phase}" ]]; then
        set_phase "${now}"
        phase=${now}
      fi
      if [[ ${phase} == "${PHASE_SERVING}" && ${cache} == "${CACHE_COLD}" && ${saved} == 0 ]]; then
        saved=1
        save_cache || log "the compile cache was not saved (the cache note says why); watching on"
      fi
    fi
    if [[ ${phase} == "${PHASE_SERVING}" ]]; then
      sleep "$((WATCH_INTERVAL_SECONDS * 6))"
    else
      sleep "${WATCH_INTERVAL_SECONDS}"
    fi
  done
  log "container ${CONTAINER} is gone; stopped watching"
}

main() {
  mkdir -p "${STATE_DIR}"/{hf-cache,logs}
  chmod 700 "${STATE_DIR}"
  set_phase "${PHASE_READING_SECRETS}"
  publish "${KEY_RESTARTS}" 0
  publish "${KEY_LAST_ERROR}" ""
  service_account >/dev/null  # asked once, here: error lines name it
  fetch_secret HF_TOKEN "${HF_TOKEN_SECRET}" "${SECRET_DENIED_TRIES}"
  fetch_secret VLLM_API_KEY "${API_KEY_SECRET}" "${KEY_DENIED_TRIES}"
  publish "${KEY_LAST_ERROR}" ""
  set_phase "${PHASE_PULLING_IMAGE}"
  pull_image
  publish "${KEY_LAST_ERROR}" ""
  local cache address output
  cache=$(restore_cache)
  publish "${KEY_CACHE}" "${cache}"
  timeout "${DOCKER_SECONDS}" docker rm -f "${CONTAINER}" >/dev/null 2>&1 || true
  # `-e HF_TOKEN -e VLLM_API_KEY` copy the variables from this environment into the container's:
  # vLLM takes its API key from VLLM_API_KEY when no key flag is given, so the key is in no argv.
  if ! output=$(timeout "${DOCKER_SECONDS}" docker run --detach --name "${CONTAINER}" --restart unless-stopped \
      --privileged --network host --shm-size 16g \
      -v "${STATE_DIR}/hf-cache:/root/.cache/huggingface" \
      -v "${CACHE_DIR}:/root/.cache/vllm" \
      -e HF_TOKEN -e VLLM_API_KEY \
      --entrypoint vllm \
      "${VLLM_IMAGE}" serve "${MODEL_NAME}" "${VLLM_ARGS[@]}" 2>&1); then
    fail "docker run ${VLLM_IMAGE}: $(tail -n 1 <<<"${output}")"
  fi
  unset HF_TOKEN VLLM_API_KEY
  # The address vLLM answers on: the VM's first (VPC) address, as `hostname -I` lists them; loopback
  # when it lists none (vLLM listens on every address with --network host).
  address=$(hostname -I 2>/dev/null || true)
  address=${address%% *}
  address=${address:-127.0.0.1}
  log "vLLM is starting in container ${CONTAINER}: http://${address}:${MODEL_PORT}/v1"
  set_phase "${PHASE_LOADING_WEIGHTS}"
  # The watcher outlives this script (google-startup-scripts.service stops only its main process,
  # KillMode=process); its output goes to a file, not the startup-script log this script owns.
  watch_vllm "${cache}" "${address}" </dev/null >>"${STATE_DIR}/logs/watch.log" 2>&1 &
  disown
}

main "$@"
