#!/bin/sh
# Runs an MPI program on "two hosts for real": two Linux network namespaces,
# each with a hostname of its own (a UTS namespace per side), joined by two
# veth pairs: a data link 10.231.X.1 <-> 10.231.X.2 that carries only the
# MPI messages (btl tcp) and a control link 10.230.X.1 <-> 10.230.X.2 that
# carries mpirun <-> orted traffic (launch, PMIx).  mpirun runs in namespace
# 1 and starts the orted of namespace 2 through a generated rsh agent (in
# place of ssh) that runs it with `ip netns exec`.
#
#   tests/runtime/mpi/two_hosts.sh [COMMAND [ARG...]]
#
# COMMAND defaults to $BUILD/tests/runtime/mpi/test_collectives (BUILD=build).
# Environment: NP (ranks, default 4; ranks 0..ceil(NP/2)-1 in namespace 1,
# the rest in namespace 2), TIMEOUT (seconds for the mpirun, default 300),
# TWO_HOSTS_BTL (default self,tcp: every message between ranks goes through
# TCP; self,vader,tcp keeps shared memory within a side), TWO_HOSTS_MIN_BYTES
# (default 1: the data link must carry at least that many bytes).
#
# Prints the program's output, then its own checks, "ok - two hosts: ..." or
# "not ok - two hosts: ...": the program exited with status 0 (and, where it
# prints ok/not ok lines, its last line is "# done"); the ranks ran in the
# two namespaces, under the two hostnames, split as asked; MPI messages
# crossed the data link.  Exits 1 if any failed.  Where the machine does not
# allow it (not root, no CAP_SYS_ADMIN/CAP_NET_ADMIN, no ip/unshare/mpirun/
# timeout, mpirun not Open MPI, network namespaces, veth pairs, `ip netns
# exec` or UTS namespaces refused) it prints the one line
# "# SKIP two hosts: REASON" and exits 0.  The namespaces, the processes in
# them and the temporary directory go on every exit path (a trap; what a run
# killed by SIGKILL leaves, the next run removes).
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BUILD=${BUILD:-build}
NP=${NP:-4}
TIMEOUT=${TIMEOUT:-300}
BTL=${TWO_HOSTS_BTL:-self,tcp}
MIN_BYTES=${TWO_HOSTS_MIN_BYTES:-1}
if [ $# -eq 0 ]; then
    case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD;; esac
    set -- "$BUILD/tests/runtime/mpi/test_collectives"
fi

skip() { echo "# SKIP two hosts: $*"; exit 0; }

# ---- can this machine do it? ----
for tool in ip unshare mpirun timeout; do
    command -v "$tool" >/dev/null 2>&1 || skip "no '$tool' command"
done
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need root)"
capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status 2>/dev/null)
if [ -n "$capeff" ]; then
    caps=$((0x$capeff))
    [ $((caps >> 21 & 1)) -eq 1 ] || skip "no CAP_SYS_ADMIN"
    [ $((caps >> 12 & 1)) -eq 1 ] || skip "no CAP_NET_ADMIN"
fi
mpirun --version 2>/dev/null | grep -q 'Open MPI' || skip "mpirun is not Open MPI"
case $NP in ''|*[!0-9]*) echo "not ok - two hosts: NP=$NP is not a number"; exit 1;; esac
if [ "$NP" -lt 2 ]; then echo "not ok - two hosts: NP=$NP, need at least 2"; exit 1; fi
if ! command -v "$1" >/dev/null 2>&1; then
    echo "not ok - two hosts: no program $1 (build it: make mpi-tests)"; exit 1
fi
case $1 in /*) ;; */*) prog=$(pwd)/$1; shift; set -- "$prog" "$@";; esac   # both sides find it

# ---- the two hosts ----
id=$$
ns1=shardc2h-a-$id ns2=shardc2h-b-$id
host1=shardc-host1-$id host2=shardc-host2-$id
ve1=sc2ha$id ve2=sc2hb$id        # the data link: MPI messages (btl tcp) only
vc1=sc2hca$id vc2=sc2hcb$id      # the control link: mpirun <-> orted (oob, PMIx)
x=$((id % 250 + 1))
net=10.231.$x ctl=10.230.$x
ip1=$net.1 ip2=$net.2 cip1=$ctl.1 cip2=$ctl.2
tmp= job=
made1= made2=

cleanup() {
    [ -n "$job" ] && kill -TERM "$job" 2>/dev/null   # timeout passes it on to mpirun
    for ns in ${made1:+$ns1} ${made2:+$ns2}; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns delete "$ns" 2>/dev/null
    done
    made1= made2=
    [ -n "$tmp" ] && rm -rf "$tmp"
    tmp=
}
trap cleanup EXIT
trap 'cleanup; trap - EXIT; exit 130' INT
trap 'cleanup; trap - EXIT; exit 143' TERM
trap 'cleanup; trap - EXIT; exit 129' HUP

# What an earlier run could not remove (killed with SIGKILL, or a signal in
# the instant between making a thing and noting it): its names carry its pid.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(shardc2h-[ab]-[0-9][0-9]*\).*/\1/p'); do
    kill -0 "${ns##*-}" 2>/dev/null && continue   # that run is still going
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns delete "$ns" 2>/dev/null
done
for d in "${TMPDIR:-/tmp}"/shardc-two-hosts.*.*; do
    [ -d "$d" ] || continue
    pid=${d#"${TMPDIR:-/tmp}"/shardc-two-hosts.}; pid=${pid%%.*}
    case $pid in ''|*[!0-9]*) continue;; esac
    kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardc-two-hosts.$id.XXXXXX") || skip "mktemp -d failed"

made1=1   # (before, so that a signal in between still removes it)
err=$(ip netns add "$ns1" 2>&1) || { made1=; skip "network namespace creation refused: 'ip netns add' said: $err"; }
made2=1
err=$(ip netns add "$ns2" 2>&1) || { made2=; skip "second network namespace refused: $err"; }
# No IPv6 on the links (its neighbour discovery would add bytes to count).
for ns in "$ns1" "$ns2"; do
    ip netns exec "$ns" sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 \
        /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ -w $f ] && echo 1 >$f; done' 2>/dev/null
done
err=$(ip link add "$ve1" netns "$ns1" type veth peer name "$ve2" netns "$ns2" 2>&1) ||
    skip "veth pair refused: 'ip link add ... type veth' said: $err"
err=$(ip link add "$vc1" netns "$ns1" type veth peer name "$vc2" netns "$ns2" 2>&1) ||
    skip "second veth pair refused: $err"
err=$( { ip -n "$ns1" addr add "$ip1/24" dev "$ve1" && ip -n "$ns2" addr add "$ip2/24" dev "$ve2" &&
         ip -n "$ns1" addr add "$cip1/24" dev "$vc1" && ip -n "$ns2" addr add "$cip2/24" dev "$vc2" &&
         for ns in "$ns1" "$ns2"; do ip -n "$ns" link set lo up || exit 1; done &&
         ip -n "$ns1" link set "$ve1" up && ip -n "$ns2" link set "$ve2" up &&
         ip -n "$ns1" link set "$vc1" up && ip -n "$ns2" link set "$vc2" up; } 2>&1) ||
    skip "configuring the veth pairs failed: $err"
err=$(ip netns exec "$ns2" true 2>&1) || skip "entering a network namespace refused: 'ip netns exec' said: $err"
err=$(ip netns exec "$ns2" unshare --uts sh -c "hostname $host2 && hostname" 2>&1)
[ "$err" = "$host2" ] || skip "UTS namespace (own hostname per side) refused: $err"

# Open MPI's rsh launcher runs "AGENT [OPTIONS] HOST COMMAND..." the way it
# would run ssh; this agent runs COMMAND through a shell in the namespace
# (and under the hostname) of HOST instead.
cat >"$tmp/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift;; *) break;; esac; done
host=\$1; shift
case \$host in
$cip1) ns=$ns1 name=$host1 side=1;;
$cip2) ns=$ns2 name=$host2 side=2;;
*) echo "two_hosts agent: unknown host \$host" >&2; exit 1;;
esac
TMPDIR=$tmp/side\$side; export TMPDIR
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && eval "\$1"' "\$name" "\$*"
EOF
# Every rank first records where it runs (rank, hostname, network namespace).
cat >"$tmp/where" <<EOF
#!/bin/sh
echo "\${OMPI_COMM_WORLD_RANK:-?} \$(hostname) \$(readlink /proc/self/ns/net)" >"$tmp/rank.\${OMPI_COMM_WORLD_RANK:-x}"
exec "\$@"
EOF
chmod +x "$tmp/agent" "$tmp/where"

n1=$(((NP + 1) / 2)) n2=$((NP / 2))
bytes() {  # bytes DEV: RX+TX bytes of DEV, as seen in ns1
    ip netns exec "$ns1" cat "/sys/class/net/$1/statistics/rx_bytes" \
        "/sys/class/net/$1/statistics/tx_bytes" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}
netns1=$(ip netns exec "$ns1" readlink /proc/self/ns/net)
netns2=$(ip netns exec "$ns2" readlink /proc/self/ns/net)

mkdir "$tmp/side1" "$tmp/side2"
d0=$(bytes "$ve1") k0=$(bytes "$vc1")
t0=$(date +%s)
root=
[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
# The runtime's settings (SHARDC_LOCAL_DEVICES, SHARDC_TIMEOUT, ...) go to
# both sides with -x, as they would have to between real hosts.
fwd=$(env | sed -n 's/^\(SHARDC_[A-Za-z0-9_]*\)=.*/-x \1/p' | tr '\n' ' ')
# mpirun runs in ns1, as host1, and starts ns2's orted through the agent; the
# hosts are named by their control addresses, messages go over the data link.
# TMPDIR is per side so that the two sides' session directories do not meet.
TMPDIR=$tmp/side1 timeout -k 10 "$TIMEOUT" \
    ip netns exec "$ns1" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host1" \
    mpirun $root --oversubscribe --bind-to none $fwd \
    -H "$cip1:$n1,$cip2:$n2" -np "$NP" \
    --mca plm rsh --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$ctl.0/24" \
    --mca pml ob1 --mca btl "$BTL" --mca btl_tcp_if_include "$net.0/24" \
    "$tmp/where" "$@" >"$tmp/out" 2>&1 &
job=$!
wait "$job"   # (in the background so that a signal's trap runs at once)
rc=$?
job=
secs=$(($(date +%s) - t0))
d1=$(bytes "$ve1") k1=$(bytes "$vc1")
cat "$tmp/out"

fails=0
check() {  # check STATUS MESSAGE: "ok" where STATUS is 0
    if [ "$1" -eq 0 ]; then echo "ok - two hosts: $2"
    else echo "not ok - two hosts: $2"; fails=$((fails + 1)); fi
}
st=$rc what="exit status $rc"
[ "$rc" -eq 124 ] && what="timed out after $TIMEOUT s"
[ "$rc" -eq 137 ] && what="killed $TIMEOUT + 10 s"
if grep -q -E '^(not )?ok |^# done' "$tmp/out"; then   # a TAP-like program
    tail -1 "$tmp/out" | grep -q '^# done' || { st=1; what="$what, last line not '# done'"; }
fi
check $st "$NP ranks of $(basename "$1") ran in $secs s ($what)"

where=$(cat "$tmp"/rank.* 2>/dev/null | sort -n)
in1=$(echo "$where" | awk -v h="$host1" -v n="$netns1" '$2 == h && $3 == n' | wc -l)
in2=$(echo "$where" | awk -v h="$host2" -v n="$netns2" '$2 == h && $3 == n' | wc -l)
r1=$(echo "$where" | awk -v h="$host1" '$2 == h { printf "%s%s", s, $1; s = "," }')
r2=$(echo "$where" | awk -v h="$host2" '$2 == h { printf "%s%s", s, $1; s = "," }')
[ "$in1" -eq "$n1" ] && [ "$in2" -eq "$n2" ]; st=$?
check $st "ranks {$r1} on $host1 ($ip1, $netns1), ranks {$r2} on $host2 ($ip2, $netns2), $n1 + $n2 asked"
[ "$st" -ne 0 ] && echo "# where the ranks ran (rank hostname netns): $(echo "$where" | tr '\n' ';')"

data=$((d1 - d0)) ctlb=$((k1 - k0))
[ "$data" -ge "$MIN_BYTES" ]; st=$?
check $st "$data bytes of MPI messages crossed the data veth $ip1<->$ip2 (btl $BTL over TCP, at least $MIN_BYTES asked; $ctlb bytes of launch and PMIx on the control veth)"

[ "$fails" -eq 0 ]
