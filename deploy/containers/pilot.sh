#!/usr/bin/env bash
# The relayed layout of docs/deploy.md §2a as containers: a relay, the Server, the Host
# and a guest, each site on its own podman network that only the relay also joins, so the
# sites reach nothing but the relay, and no site opens a port. One command:
#   deploy/containers/pilot.sh WORKDIR [privfl init vfl options...]
# e.g. deploy/containers/pilot.sh /tmp/pilot --epochs 3 --label-epsilon inf
# Writes, replacing what a former run left there: WORKDIR/sites (the kit, one folder per
# site, made by `privfl init vfl` in the lean image), WORKDIR/runs/<site> (each party's
# run folder), and, captured while the Host trains: WORKDIR/listeners-<site>.txt
# (`ss -Hltn` in the site's network namespace) and WORKDIR/health-<site>.txt (`privfl
# health` in the running container).
# Exits 0 when every party finished with exit status 0. Needs root, podman, runc and the
# images of deploy/containers/build.sh. Environment: PILOT_TAG (names of the containers
# and networks; default privfl-pilot), PILOT_IMAGE (default localhost/privfl:lean),
# PILOT_KEEP=1 keeps the containers and networks for inspection.
set -euo pipefail
work="${1:?usage: pilot.sh WORKDIR [privfl init vfl options...]}"; shift
tag="${PILOT_TAG:-privfl-pilot}"
image="${PILOT_IMAGE:-localhost/privfl:lean}"
podman=(podman --runtime runc --cgroup-manager=cgroupfs)
# This kernel refuses to raise rlimits inside a container; ask for what the host allows.
limits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
sites=(server:server host:host guest:guest-1)   # role:party
port=7443
mkdir -p "$work" && work="$(cd "$work" && pwd)"
# A rerun in the same WORKDIR starts afresh: its kit, run folders and records are replaced.
rm -rf "$work/sites" "$work/runs" "$work"/listeners-*.txt "$work"/health-*.txt "$work"/exit-*.txt

cleanup() {
  [ "${PILOT_KEEP:-0}" = 1 ] && return
  for c in relay server host guest-1 init; do "${podman[@]}" rm -f -t 0 "$tag-$c" >/dev/null 2>&1 || true; done
  for s in "${sites[@]}"; do "${podman[@]}" network rm -f "$tag-${s#*:}" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
cleanup

# 1. The kit, made in the image itself (the machine running this needs no privfl).
"${podman[@]}" run --rm --name "$tag-init" "${limits[@]}" --read-only --network none \
  -v "$work:/var/lib/privfl/out:U" "$image" \
  init vfl --parties server,host,guest-1 --all-keys-here --out out/sites \
  --relay "tcp://$tag-relay:$port" "$@" >"$work/init.log" 2>&1 \
  || { cat "$work/init.log" >&2; echo "pilot: privfl init vfl failed" >&2; exit 1; }
chmod -R go-rwx "$work/sites"   # each folder 0700, keys 0600: as privfl enforces on a site

# (podman.log: where podman has no systemd to time the images' HEALTHCHECK, it says so
# there at each start; step 4 runs the same command, `privfl health`, itself.)
# 2. One internal network per site (no route out); the relay joins all of them.
nets=()
for s in "${sites[@]}"; do
  "${podman[@]}" network create --internal "$tag-${s#*:}" >/dev/null
  nets+=(--network "$tag-${s#*:}")
done
mkdir -p "$work/runs/relay"
"${podman[@]}" run -d --name "$tag-relay" "${limits[@]}" --read-only "${nets[@]}" \
  -v "$work/sites/relay:/var/lib/privfl/kit:ro,U" -v "$work/runs/relay:/var/lib/privfl/out:U" \
  "$image" relay --job kit/job.toml --bind "tcp://0.0.0.0:$port" --ready-file out/ready \
  >/dev/null 2>>"$work/podman.log"
for _ in $(seq 1200); do   # wait for the relay's ready file (an event), at most 2 minutes
  [ -s "$work/runs/relay/ready" ] && break
  [ "$("${podman[@]}" inspect -f '{{.State.Running}}' "$tag-relay")" = true ] || break
  sleep 0.1
done
[ -s "$work/runs/relay/ready" ] || { "${podman[@]}" logs "$tag-relay" >&2; echo "pilot: the relay did not start" >&2; exit 1; }

# 3. The sites, each alone on its network, root filesystem read-only.
for s in "${sites[@]}"; do
  role="${s%%:*}" name="${s#*:}"
  mkdir -p "$work/runs/$name"
  "${podman[@]}" run -d --name "$tag-$name" "${limits[@]}" --read-only --network "$tag-$name" \
    -v "$work/sites/$name:/var/lib/privfl/kit:ro,U" -v "$work/runs/$name:/var/lib/privfl/out:U" \
    "$image" vfl "$role" --job kit/job.toml --party "$name" --out out --no-progress \
    >/dev/null 2>>"$work/podman.log"
done

# 4. While the Host trains (its first epoch recorded): listeners and health of each site,
# all at once (a short run may end within seconds of that).
for _ in $(seq 36000); do
  [ -s "$work/runs/host/metrics.jsonl" ] && break
  [ "$("${podman[@]}" inspect -f '{{.State.Running}}' "$tag-host")" = true ] || break
  sleep 0.1
done
for s in "${sites[@]}"; do
  name="${s#*:}"
  pid="$("${podman[@]}" inspect -f '{{.State.Pid}}' "$tag-$name")"
  if [ "$pid" -gt 0 ]; then
    nsenter --target "$pid" --net ss -Hltn >"$work/listeners-$name.txt"
  else
    echo "pilot: $name was not running when the Host trained" | tee "$work/listeners-$name.txt" >"$work/health-$name.txt"
  fi
done
for s in "${sites[@]}"; do
  name="${s#*:}"
  [ -s "$work/health-$name.txt" ] && continue
  ("${podman[@]}" exec "$tag-$name" privfl health --out out >"$work/health-$name.txt" 2>&1 || true) &
done
wait

# 5. Every party to the end; its exit status and log.
failed=0
for s in "${sites[@]}"; do
  name="${s#*:}"
  code="$("${podman[@]}" wait "$tag-$name")"
  "${podman[@]}" logs "$tag-$name" >"$work/$name.log" 2>&1
  echo "$code" >"$work/exit-$name.txt"
  echo "pilot: $name exited $code; listeners while training: $(wc -l <"$work/listeners-$name.txt"); health: $(cat "$work/health-$name.txt")"
  [ "$code" = 0 ] || { failed=1; tail -5 "$work/$name.log" >&2; }
done
exit "$failed"
