# Two test hosts made of network namespaces, for tests/multihost/multihost_test.sh and
# bench/bsr_algorithms.sh (source it from the repository root, as root):
#
#   label=multihost link_rate=1gbit        # message prefix; inter-host bandwidth (tc rate units)
#   source tests/multihost/test_hosts.sh   # hosts A 10.77.0.1 and B 10.77.0.2 joined by a bridge,
#                                          # Redis with a password on A; exits 77 (skipped) with
#                                          # the reason where namespaces cannot be made
#   start_host a RUN [launch flags] -- CMD # one `hspmd launch -n 2` on host A, log $work/RUN-a.log
#
# Each host is a namespace joined to a third one holding the bridge (the "switch") by a veth pair
# whose switch end is shaped (netem: rate and 1 ms; tbf: the rate alone where the kernel has no
# netem). Within a host, workers talk over loopback: two speed tiers. Also made: $work/kjv (the
# corpus as a dataset), $work/cluster.json (ranks 0-1 node 0, 2-3 node 1), $work/cross.json (a
# heterogeneous strategy whose pipelines cross the hosts), $work/dp2-pp2.json (one pipeline per
# host) and $train (the common `hspmd train` flags). Everything is removed on exit.
bin="${HSPMD_BINARY_DIR:-build/release}/hspmd"
label="${label:-multihost}"
link_rate="${link_rate:-1gbit}"

skip() { echo "$label: SKIPPED: $*"; exit 77; }
fail() { echo "$label: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "no 'ip' command (Debian package iproute2)"
command -v tc > /dev/null || skip "no 'tc' command (Debian package iproute2)"
redis=$(command -v redis-server) || skip "redis-server is not installed (Debian package redis-server)"
[ -x "$bin" ] || fail "$bin is not built"

tag="hm$$"                    # names of this run's namespaces and links (15 characters at most)
ns_sw="${tag}sw" ns_a="${tag}a" ns_b="${tag}b"
addr_a=10.77.0.1 addr_b=10.77.0.2 port=6390
work=$(mktemp -d /tmp/hspmd-multihost.XXXXXX)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  for ns in "$ns_a" "$ns_b" "$ns_sw"; do
    for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# --- the hosts ---------------------------------------------------------------------------------
ip netns add "$ns_sw" 2> "$work/ns.err" || skip "cannot create network namespaces: $(cat "$work/ns.err")"
ip netns add "$ns_a" && ip netns add "$ns_b" || fail "ip netns add"
in_ns "$ns_sw" ip link add br0 type bridge && in_ns "$ns_sw" ip link set br0 up || fail "bridge"
for host in a b; do
  ns="${tag}${host}"; addr=$([ $host = a ] && echo $addr_a || echo $addr_b)
  ip link add "${tag}${host}0" netns "$ns" type veth peer name "${tag}${host}1" netns "$ns_sw" || fail "veth for $host"
  in_ns "$ns" ip link set lo up
  in_ns "$ns" ip addr add "$addr/24" dev "${tag}${host}0"
  in_ns "$ns" ip link set "${tag}${host}0" up
  in_ns "$ns_sw" ip link set "${tag}${host}1" master br0
  in_ns "$ns_sw" ip link set "${tag}${host}1" up
  # The inter-host link: $link_rate and 1 ms each way with netem; kernels without sch_netem get the
  # bandwidth alone from a token bucket (tbf). The switch end shapes what reaches the host.
  if ! in_ns "$ns_sw" tc qdisc add dev "${tag}${host}1" root netem delay 1ms rate "$link_rate" 2> /dev/null; then
    in_ns "$ns_sw" tc qdisc add dev "${tag}${host}1" root tbf rate "$link_rate" burst 256kb latency 100ms 2> "$work/tc.err" ||
      skip "tc can shape no link here (neither netem nor tbf): $(cat "$work/tc.err")"
    shaping="$link_rate (tbf; this kernel has no netem, so no added latency)"
  else
    shaping="$link_rate and 1 ms each way (netem)"
  fi
done
echo "$label: hosts $addr_a and $addr_b, links shaped to $shaping"

# --- the store: Redis on host A, with a password ------------------------------------------------
password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
umask 077
echo "$password" > "$work/password"
printf 'bind %s\nport %s\nrequirepass %s\nsave ""\nappendonly no\n' "$addr_a" "$port" "$password" > "$work/redis.conf"
in_ns "$ns_a" "$redis" "$work/redis.conf" > "$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "Ready to accept connections" "$work/redis.log" && break; sleep 0.1; done
grep -q "Ready to accept connections" "$work/redis.log" || fail "redis did not start: $(tail -3 "$work/redis.log")"
store="redis://$addr_a:$port"

# --- the training runs ----------------------------------------------------------------------------
"$bin" data prepare --input data/corpus/kjv-genesis-2kings.txt --output "$work/kjv" > "$work/prepare.log" 2>&1 ||
  fail "data prepare: $(tail -3 "$work/prepare.log")"
cat > "$work/cross.json" << 'JSON'
{"name": "hetero-cross", "zero1": false,
 "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-0"}, {"ranks": "2", "layers": "1-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-2"}, {"ranks": "3", "layers": "3-3"}]}]}
JSON
cat > "$work/dp2-pp2.json" << 'JSON'
{"name": "dp2-pp2", "zero1": false,
 "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]}
JSON
# The cluster as it is here: ranks 0-1 on host A (node 0), 2-3 on host B (node 1).
# Two tiers: loopback within a host (10 GB/s), the shaped link between hosts (given in bytes/s
# as the link rate's order of magnitude: 1.25e8 for 1 Gbit/s), so the BSR's link heuristic prefers
# an owner on the receiver's host.
sed -e 's/"id": 2, "node": 0/"id": 2, "node": 1/' -e 's/"id": 3, "node": 0/"id": 3, "node": 1/' \
  -e 's/"intra_node_bandwidth": [0-9.e+]*/"intra_node_bandwidth": 1e10/' \
  -e 's/"inter_node_bandwidth": [0-9.e+]*/"inter_node_bandwidth": 1.25e8/' \
  examples/clusters/local-hetero-4.json > "$work/cluster.json"
grep -q '"id": 3, "node": 1' "$work/cluster.json" && grep -q '"inter_node_bandwidth": 1.25e8' "$work/cluster.json" ||
  fail "cannot make the two-host cluster file"
train="$bin train --model configs/llama-tiny.json --data $work/kjv --seq-len 64 --global-batch-tokens 256 --threads 1
  --warmup 2 --lr 2.5e-4 --min-lr 2.5e-5 --cluster $work/cluster.json
  --profile examples/profiles/local-hetero-4-llama-tiny.json --heartbeat-timeout 2"

# start_host HOST RUN ARGS...: one launcher on HOST (a or b), its output in $work/RUN-HOST.log.
start_host() {
  local host=$1 run=$2; shift 2
  local ns="${tag}${host}" addr node
  addr=$([ "$host" = a ] && echo $addr_a || echo $addr_b)
  node=$([ "$host" = a ] && echo 0 || echo 1)
  in_ns "$ns" "$bin" launch -n 2 --nnodes 2 --node-rank "$node" --store "$store" --store-password-file "$work/password" \
    --run-id "$run" --host "$addr" "$@" > "$work/$run-$host.log" 2>&1 &
  pids+=($!)
  eval "launcher_$host=$!"
}

now() { date +%s.%N; }
# wait_for_line FILE REGEX SECONDS: 0 when the line appeared in time.
wait_for_line() {
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do grep -qE "$2" "$1" && return 0; sleep 0.05; done
  return 1
}
# The first step line after the recovery report, on host A (rank 0 logs the steps).
wait_for_step_after_recovery() {
  local deadline=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    awk '/recovery: re-planned/ {r = 1} r && /\[rank 0\] step / {found = 1} END {exit !found}' "$1" && return 0
    sleep 0.05
  done
  return 1
}

