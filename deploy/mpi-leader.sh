#!/bin/sh
# gearbox-mpi-leader SERVE_ARGS...: the leader pod's command in a
# LeaderWorkerSet group (gearbox-lws.yaml). It waits until the sshd of
# every worker pod of its group answers, writes an Open MPI hostfile with
# one slot per pod, leader first, and runs `gearbox serve --transport mpi
# SERVE_ARGS...` as an mpirun job over ssh: process 0 (the leader's)
# serves HTTP, the workers' processes run their ranks. mpirun exits
# non-zero when a rank dies or hangs past --comm-timeout, so the pod
# restarts and LeaderWorkerSet recreates the group.
#
# Environment: LWS_GROUP_SIZE and LWS_LEADER_ADDRESS (set by
# LeaderWorkerSet), GEARBOX_SSH_PORT (the workers' sshd port, default
# 2222), GEARBOX_SSH_WAIT (seconds to wait for the workers, default 600).
set -eu
size=${LWS_GROUP_SIZE:?gearbox-mpi-leader runs in a LeaderWorkerSet pod (LWS_GROUP_SIZE is unset)}
leader=${LWS_LEADER_ADDRESS:?gearbox-mpi-leader runs in a LeaderWorkerSet pod (LWS_LEADER_ADDRESS is unset)}
port=${GEARBOX_SSH_PORT:-2222}
wait=${GEARBOX_SSH_WAIT:-600}
self=$(hostname)     # the leader pod: <set>-<group>
domain=${leader#*.}  # <set>.<namespace>..., the group's headless service
ssh_opts="-p $port -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"

hosts=$(mktemp)
echo "$self slots=1" >"$hosts"
i=1
while [ "$i" -lt "$size" ]; do
	worker="$self-$i.$domain"
	start=$(date +%s)
	# shellcheck disable=SC2086 # ssh_opts is a list of options
	until ssh $ssh_opts -o BatchMode=yes -o ConnectTimeout=5 "$worker" true; do
		if [ $(($(date +%s) - start)) -ge "$wait" ]; then
			echo "gearbox-mpi-leader: worker $worker: no sshd on port $port after $wait s" >&2
			exit 1
		fi
		sleep 2
	done
	echo "$worker slots=1" >>"$hosts"
	i=$((i + 1))
done
echo "gearbox-mpi-leader: $size processes on:" >&2
cat "$hosts" >&2

# odls_base_sigkill_timeout must exceed serve's --comm-timeout (10 s by
# default) plus 2 s, so the server reports a dead rank before mpirun ends
# the job (see the README).
exec mpirun --allow-run-as-root --hostfile "$hosts" -n "$size" --map-by node --bind-to none \
	--mca plm_rsh_args "$ssh_opts" --mca odls_base_sigkill_timeout 30 \
	gearbox serve --transport mpi "$@"
