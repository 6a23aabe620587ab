#!/usr/bin/env bash
# On the GPU machine (after bench/gpu/pack.sh here; through the device tool, carry [".gpu"]):
# bench/rule_rewards.py once per server variant, and during each variant's batch run every
# server and load-generator thread's CPU share over 4 s (from /proc), to see which threads are
# the limit. bench/README.md, "verl's rule rewards", has what it found.
#
#   VARIANTS="SHARDS:CAF_THREADS:IO_THREADS ..." bash bench/gpu/sweep.sh
#   (0 = the server's default; default VARIANTS: "0:0:0 1:0:0", the defaults and one shard)
# Also: DUR (measured seconds per run, 8; at least 6, so that the 7 s of thread readings fall
# within the batch run), VERL_S (least seconds of verl calls, 3), LG (load
# generator threads, 4), BC (connections for batches, 16).
set -uo pipefail
cd "$(dirname "$0")/../.."
S=/tmp/arbiter-gpu-run
[ -x "$S/arbiter" ] || bash bench/gpu/run.sh none > /dev/null 2>&1
snap() {
  for p in $(pgrep -f "$S/bin/arbiter serve") $(pgrep -f "$S/bin/arbiter-loadgen"); do
    for t in /proc/"$p"/task/*; do
      echo "$p/$(basename "$t") $(cat "$t/comm" 2>/dev/null)" \
        "$(awk '{print $14+$15}' "$t/stat" 2>/dev/null)"
    done
  done
}
for v in ${VARIANTS:-0:0:0 1:0:0}; do
  IFS=: read -r sh th io <<< "$v"
  echo "=== scheduler.shards=$sh scheduler.threads=$th server.io_threads=$io (0: default)"
  log=/tmp/sweep_${sh}_${th}_${io}.log
  ARBITER_SCHEDULER_SHARDS=$sh ARBITER_SCHEDULER_THREADS=$th ARBITER_SERVER_IO_THREADS=$io \
    timeout 150 python3 bench/rule_rewards.py --arbiter "$S/arbiter" \
    --loadgen "$S/arbiter-loadgen" \
    --verl-dir .gpu/verl --loadgen-threads "${LG:-4}" --batch-connections "${BC:-16}" \
    --single-connections 128 --duration-s "${DUR:-8}" --warmup-s 1 --verl-s "${VERL_S:-3}" \
    --out "/tmp/sweep_out_${sh}_${th}_${io}" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 900); do grep -q 'running: Arbiter /v1/score, 256' "$log" && break; sleep 0.1; done
  sleep 3; snap > /tmp/sweep_a.txt; sleep 4; snap > /tmp/sweep_b.txt
  python3 - <<'PY'
before = {}
for line in open("/tmp/sweep_a.txt"):
    f = line.split()
    if len(f) == 3:
        before[f[0]] = int(f[2])
by_name = {}
for line in open("/tmp/sweep_b.txt"):
    f = line.split()
    if len(f) == 3 and f[0] in before:
        # Clock ticks (1/100 s) over 4 s, as a percentage of one core.
        by_name.setdefault(f[1], []).append((int(f[2]) - before[f[0]]) / 4.0)
for name, shares in sorted(by_name.items()):
    shares.sort(reverse=True)
    top = " ".join(f"{x:.0f}" for x in shares[:6])
    print(f"  {name:18s} threads={len(shares):2d} sum={sum(shares):5.0f}%  busiest: {top}")
PY
  wait $pid
  grep -E "verl \(|Arbiter /v1" "$log"
done
