package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// leaderResult is what a run of mpi-leader.sh did: its combined output
// and exit error, and what the fakes recorded (empty when not called).
type leaderResult struct {
	out    string
	err    error
	mpirun string // mpirun's arguments
	hosts  string // the hostfile mpirun was given
	ssh    string // one line of arguments per ssh call
}

// leaderRun runs mpi-leader.sh with args and env under fake hostname, ssh
// and mpirun commands: hostname prints gearbox-mpi-0, ssh succeeds for the
// hosts in up (and logs each call), mpirun records its arguments and the
// hostfile it was given.
func leaderRun(t *testing.T, env []string, up []string, args ...string) leaderResult {
	t.Helper()
	sh, lookErr := exec.LookPath("sh")
	if lookErr != nil {
		t.Skip("no sh:", lookErr)
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec")
	if err := os.Mkdir(rec, 0o755); err != nil {
		t.Fatal(err)
	}
	fakes := map[string]string{
		"hostname": "#!/bin/sh\necho gearbox-mpi-0\n",
		// The host is ssh's last argument but one (the command, true).
		"ssh":    "#!/bin/sh\necho \"$*\" >>" + rec + "/ssh\nfor a; do prev=$host; host=$a; done\ncase \" " + strings.Join(up, " ") + " \" in *\" $prev \"*) exit 0 ;; esac\nexit 255\n",
		"mpirun": "#!/bin/sh\necho \"$*\" >" + rec + "/args\nwhile [ $# -gt 0 ]; do [ \"$1\" = --hostfile ] && cp \"$2\" " + rec + "/hosts; shift; done\n",
		"sleep":  "#!/bin/sh\n",
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(sh, append([]string{"mpi-leader.sh"}, args...)...)
	cmd.Env = append([]string{"PATH=" + dir + ":" + os.Getenv("PATH")}, env...)
	b, err := cmd.CombinedOutput()
	read := func(name string) string {
		data, _ := os.ReadFile(filepath.Join(rec, name))
		return string(data)
	}
	return leaderResult{out: string(b), err: err, mpirun: read("args"), hosts: read("hosts"), ssh: read("ssh")}
}

// TestMPILeader: the leader waits for each worker's sshd, writes a hostfile
// of the group's pods, leader first, and runs gearbox serve --transport mpi
// with the given arguments on one process per pod over ssh on the sshd
// port.
func TestMPILeader(t *testing.T) {
	workers := []string{"gearbox-mpi-0-1.gearbox-mpi.default.svc", "gearbox-mpi-0-2.gearbox-mpi.default.svc"}
	env := []string{"LWS_GROUP_SIZE=3", "LWS_LEADER_ADDRESS=gearbox-mpi-0.gearbox-mpi.default.svc", "GEARBOX_SSH_PORT=2200"}
	r := leaderRun(t, env, workers, "--port=8000", "--plan=tp=3")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.out)
	}
	hosts, args, ssh := r.hosts, r.mpirun, r.ssh
	wantHosts := "gearbox-mpi-0 slots=1\n" + workers[0] + " slots=1\n" + workers[1] + " slots=1\n"
	if hosts != wantHosts {
		t.Errorf("hostfile\n%s\nwant\n%s", hosts, wantHosts)
	}
	for _, w := range []string{"-n 3", "--map-by node", "-p 2200", "odls_base_sigkill_timeout 30", "gearbox serve --transport mpi --port=8000 --plan=tp=3"} {
		if !strings.Contains(args, w) {
			t.Errorf("mpirun %q lacks %q", args, w)
		}
	}
	calls := strings.Split(strings.TrimSpace(ssh), "\n")
	if len(calls) != 2 || !strings.Contains(calls[0], "-p 2200") || !strings.HasSuffix(calls[0], workers[0]+" true") || !strings.HasSuffix(calls[1], workers[1]+" true") {
		t.Errorf("ssh calls %q: want one probe of each worker on port 2200", calls)
	}
}

// TestMPILeaderFails: without the LeaderWorkerSet environment, or with a
// worker whose sshd never answers, the leader exits non-zero saying why
// and never starts mpirun.
func TestMPILeaderFails(t *testing.T) {
	r := leaderRun(t, nil, nil, "--plan=tp=2")
	if r.err == nil || !strings.Contains(r.out, "LWS_GROUP_SIZE is unset") || r.mpirun != "" {
		t.Errorf("outside a LeaderWorkerSet: %v, %q, mpirun %q", r.err, r.out, r.mpirun)
	}
	env := []string{"LWS_GROUP_SIZE=3", "LWS_LEADER_ADDRESS=gearbox-mpi-0.gearbox-mpi.default", "GEARBOX_SSH_WAIT=0"}
	r = leaderRun(t, env, []string{"gearbox-mpi-0-1.gearbox-mpi.default"}, "--plan=tp=3")
	if r.err == nil || !strings.Contains(r.out, "worker gearbox-mpi-0-2.gearbox-mpi.default: no sshd on port 2222 after 0 s") || r.mpirun != "" {
		t.Errorf("a worker down: %v, %q, mpirun %q", r.err, r.out, r.mpirun)
	}
	if n := strings.Count(r.ssh, "\n"); n != 2 {
		t.Errorf("%d ssh probes, want one per worker until the dead one", n)
	}
}

// TestDockerfileMPI: the MPI image carries mpirun, sshd and libmpi.so.40
// (libopenmpi3) and installs the leader script where the manifest's
// command expects it.
func TestDockerfileMPI(t *testing.T) {
	data, err := os.ReadFile("Dockerfile.mpi")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, w := range []string{"openmpi-bin", "libopenmpi3", "openssh-server", "openssh-client", "COPY deploy/mpi-leader.sh /usr/local/bin/gearbox-mpi-leader", "/usr/local/bin/gearbox"} {
		if !strings.Contains(s, w) {
			t.Errorf("Dockerfile.mpi lacks %q", w)
		}
	}
	m := objects(t, "gearbox-lws.yaml")
	if c := m.lwss[0].Spec.LeaderWorkerTemplate.LeaderTemplate.Spec.Containers[0]; !slices.Contains(c.Command, "/usr/local/bin/gearbox-mpi-leader") {
		t.Errorf("leader command %v", c.Command)
	}
}
