# shellcheck shell=bash disable=SC2016  # single-quoted scripts for bash -c
# Two network namespaces joined by a veth pair: two "hosts" with their own
# addresses, for multi-node tests on one machine. Needs root and iproute2;
# source common.sh first and call mr_init.
#
#   netns_setup                        # MR_NETNS_A/B, MR_NETNS_ADDR_A/B
#   netns_exec A meshrun env           # bounded by MR_TIMEOUT
#   netns_exec B env RANK=1 ... cmd &  # concurrent ranks: background + wait_all
#   netns_cleanup                      # also run automatically (mr_on_exit)
#
# The namespaces are named mr-<pid>-<n>-a and -b. The veth ends are created
# directly inside them (never in the host namespace) and named mr0 in both;
# their addresses 10.231.X.1/24 (A) and 10.231.X.2/24 (B), X derived from the
# pid, exist only inside the namespaces, and there is no route out, so the
# test's traffic never leaves them and the host's network is untouched.
# Within a namespace, 127.0.0.1 (lo) is up too.

[[ -n ${MR_NETNS_LOADED:-} ]] && return 0
MR_NETNS_LOADED=1
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MR_NETNS_COUNT=0

# netns_setup: create the two namespaces and the veth pair, bring lo and the
# veth ends up, and check TCP both ways (netns_probe, bounded). Exports
# MR_NETNS_A, MR_NETNS_B (namespace names) and MR_NETNS_ADDR_A,
# MR_NETNS_ADDR_B (their addresses). Skips without root or ip; fails when a
# step fails. Registers netns_cleanup with mr_on_exit, and notes the names so
# that the reaper deletes them even if the test is killed.
netns_setup() {
  require_root
  require_cmd ip
  [[ -n ${MR_TMP:-} ]] || fail "netns_setup: call mr_init first"
  MR_NETNS_COUNT=$((MR_NETNS_COUNT + 1))
  local base="mr-$$-$MR_NETNS_COUNT" x=$(($$ % 250 + 1))
  MR_NETNS_A=$base-a
  MR_NETNS_B=$base-b
  MR_NETNS_ADDR_A=10.231.$x.1
  MR_NETNS_ADDR_B=10.231.$x.2
  export MR_NETNS_A MR_NETNS_B MR_NETNS_ADDR_A MR_NETNS_ADDR_B
  mr_on_exit netns_cleanup
  printf '%s\n%s\n' "$MR_NETNS_A" "$MR_NETNS_B" >>"$MR_TMP/.netns"

  ip netns add "$MR_NETNS_A" || fail "ip netns add $MR_NETNS_A failed"
  ip netns add "$MR_NETNS_B" || fail "ip netns add $MR_NETNS_B failed"
  ip link add mr0 netns "$MR_NETNS_A" type veth peer name mr0 netns "$MR_NETNS_B" \
    || fail "creating the veth pair failed"
  ip -n "$MR_NETNS_A" addr add "$MR_NETNS_ADDR_A/24" dev mr0 || fail "address $MR_NETNS_ADDR_A"
  ip -n "$MR_NETNS_B" addr add "$MR_NETNS_ADDR_B/24" dev mr0 || fail "address $MR_NETNS_ADDR_B"
  local ns
  for ns in "$MR_NETNS_A" "$MR_NETNS_B"; do
    ip -n "$ns" link set lo up || fail "lo up in $ns"
    ip -n "$ns" link set mr0 up || fail "mr0 up in $ns"
  done
  netns_probe A B || fail "no TCP from $MR_NETNS_A to $MR_NETNS_ADDR_B"
  netns_probe B A || fail "no TCP from $MR_NETNS_B to $MR_NETNS_ADDR_A"
  log "netns up: $MR_NETNS_A ($MR_NETNS_ADDR_A) <-> $MR_NETNS_B ($MR_NETNS_ADDR_B)"
}

# netns_name A|B|NAME: the namespace's name (A and B are the two of netns_setup).
netns_name() {
  case $1 in
    A | a) echo "$MR_NETNS_A" ;;
    B | b) echo "$MR_NETNS_B" ;;
    *) echo "$1" ;;
  esac
}

# netns_addr A|B: the namespace's veth address.
netns_addr() {
  case $1 in
    A | a) echo "$MR_NETNS_ADDR_A" ;;
    B | b) echo "$MR_NETNS_ADDR_B" ;;
    *) fail "netns_addr: A or B, not '$1'" ;;
  esac
}

# netns_exec A|B|NAME COMMAND [ARGS...]: run COMMAND inside the namespace
# (ip netns exec), bounded by MR_TIMEOUT seconds (with_timeout: its process
# group is killed after that; returns 124). Returns COMMAND's status.
netns_exec() {
  local ns
  ns=$(netns_name "$1")
  shift
  with_timeout "$MR_TIMEOUT" ip netns exec "$ns" "$@"
}

# netns_probe FROM TO [SECONDS]: check that a TCP connection from namespace
# FROM reaches TO's address: a one-shot listener in TO (python3, port chosen
# by the kernel) sends a token that bash's /dev/tcp reads in FROM. Bounded
# (default 10 s). Returns 0 or 1.
netns_probe() {
  local from to addr secs=${3:-10} dir port="" listener token rc=0
  from=$(netns_name "$1")
  to=$(netns_name "$2")
  addr=$(netns_addr "$2")
  dir=$(mktemp -d "$MR_TMP/.probe.XXXXXX")
  token="mr-probe-$RANDOM"
  with_timeout "$secs" ip netns exec "$to" "$MR_PYTHON" -c '
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(1)
open(sys.argv[2] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
c, _ = s.accept()
c.sendall(sys.argv[3].encode() + b"\n")
c.close()
' "$addr" "$dir/port" "$token" &
  listener=$!
  if wait_until "$secs" "probe listener in $to" test -s "$dir/port"; then
    port=$(<"$dir/port")
    local got
    got=$(with_timeout "$secs" ip netns exec "$from" bash -c \
      'exec 3<>"/dev/tcp/$0/$1" && read -r -t 5 line <&3 && echo "$line"' "$addr" "$port") || rc=1
    [[ $got == "$token" ]] || rc=1
  else
    rc=1
  fi
  wait "$listener" 2>/dev/null || rc=1
  rm -rf "$dir"
  ((rc == 0)) || log "netns_probe: $from -> $addr:${port:-?} failed"
  return "$rc"
}

# netns_wait_tcp A|B ADDR PORT [SECONDS]: from inside the namespace, retry a
# TCP connect to ADDR:PORT until it succeeds (e.g. until a rank-0 rendezvous
# listens); at most SECONDS (default 30). Returns 0 or 1.
netns_wait_tcp() {
  local ns
  ns=$(netns_name "$1")
  wait_until "${4:-30}" "$2:$3 from $ns" \
    timeout 2 ip netns exec "$ns" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$2" "$3"
}

# netns_cleanup: kill the processes still inside the two namespaces (only
# ours can be there), then delete them (which destroys the veth pair).
# Idempotent; registered by netns_setup.
netns_cleanup() {
  local ns pids
  for ns in ${MR_NETNS_A:-} ${MR_NETNS_B:-}; do
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$ns" || continue
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086
    [[ -n ${pids// /} ]] && mr_kill_pids $pids
    ip netns delete "$ns" || log "netns_cleanup: could not delete $ns"
  done
  MR_NETNS_A="" MR_NETNS_B=""
}
