package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/internal/mpitest"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
)

// TestServeMPIKilledRank serves the built-in model with --plan sp=2,tp=2
// on four MPI processes, kills process 2 with SIGKILL while four streamed
// generations run, and holds the failure contract: every request ends
// with an error event within --comm-timeout (3 s here) plus slack, /health
// answers 503 with the cause, the error counter equals the failed
// requests, the surviving followers (1 and 3) log the failure and exit,
// and mpirun exits non-zero. mpirun runs with
// odls_base_sigkill_timeout=7: when a process dies mpirun aborts the job,
// but signals the survivors only after that many seconds (1 by default,
// too soon for the server to report anything), and exits about twice
// that after the death.
func TestServeMPIKilledRank(t *testing.T) {
	port := freePort(t)
	pids := t.TempDir()
	const commTimeout = 3 * time.Second
	job := mpitest.Start(t, mpitest.Options{Procs: 4, Run: "TestServeMPIProcess", Mode: "serve", Timeout: 90 * time.Second,
		Env: []string{
			"GEARBOX_TEST_SERVE_ARGS=--transport mpi --plan sp=2,tp=2 --threads 1 --port " + strconv.Itoa(port) + " --comm-timeout " + commTimeout.String(),
			"GEARBOX_TEST_PID_DIR=" + pids,
		},
		Extra: []string{"--mca", "odls_base_sigkill_timeout", "7", "--bind-to", "none"}})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitHealthy(t, base, job)

	// A healthy request first: greedy text equal to the in-process engine's.
	got := complete(t, base, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":24,"temperature":0}`)
	if !strings.Contains(got, `"finish_reason":"length"`) || !strings.Contains(got, "there was a little girl") {
		t.Fatalf("healthy request: %s", got)
	}

	const n = 4
	type outcome struct {
		tokens int
		errEv  bool
		done   bool // finish_reason length or stop
		end    time.Time
		err    error
	}
	outs := make([]outcome, n)
	started := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			o := &outs[i]
			body := `{"model":"stories260K","prompt":"Once upon a time","max_tokens":480,"ignore_eos":true,"stream":true}`
			resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				o.err, o.end = err, time.Now()
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first := true
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.Contains(line, `"error"`):
					o.errEv = true
				case strings.Contains(line, `"finish_reason":"length"`), strings.Contains(line, `"finish_reason":"stop"`):
					o.done = true
				case strings.HasPrefix(line, "data: {"):
					o.tokens++
					if first {
						first = false
						started <- struct{}{}
					}
				}
			}
			if first {
				started <- struct{}{}
			}
			o.err, o.end = sc.Err(), time.Now()
		})
	}
	for range n {
		<-started
	}
	victim := readPID(t, filepath.Join(pids, "rank-2.pid"))
	killed := time.Now()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	bound := commTimeout + 3*time.Second
	failed := 0
	for i, o := range outs {
		switch {
		case o.err != nil:
			t.Errorf("request %d: %v", i, o.err)
		case o.done && !o.errEv:
			t.Logf("request %d finished before the kill (%d chunks)", i, o.tokens)
		case !o.errEv:
			t.Errorf("request %d ended without an error event after %d chunks", i, o.tokens)
		default:
			failed++
			if took := o.end.Sub(killed); took > bound {
				t.Errorf("request %d ended %v after the kill, bound %v", i, took, bound)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no request was running when process 1 was killed")
	}
	health, code := get(t, base+"/health")
	if code != http.StatusServiceUnavailable || !strings.Contains(health, "unhealthy") || !strings.Contains(health, "timed out") {
		t.Errorf("/health = %d %s, want 503 naming the failure", code, health)
	}
	metrics, _ := get(t, base+"/metrics")
	want := fmt.Sprintf(`gearbox:request_success_total{finished_reason="error"} %d`, failed)
	if !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q:\n%s", want, grepLines(metrics, "request_success_total"))
	}
	select {
	case <-job.Done():
	case <-time.After(bound + failureLinger + 10*time.Second):
		t.Fatalf("the job did not exit after the failure:\n%s", job.Output())
	}
	out := job.Output()
	if job.Wait() == nil {
		t.Errorf("mpirun exited 0 after a rank died:\n%s", out)
	}
	if !strings.Contains(out, "rank processes failed") {
		t.Errorf("process 0 did not log the failure:\n%s", out)
	}
	for _, r := range []int{1, 3} {
		if want := fmt.Sprintf(`msg="the MPI job failed; exiting" rank=%d`, r); !strings.Contains(out, want) {
			t.Errorf("process %d did not log the failure (%s):\n%s", r, want, out)
		}
	}
	t.Logf("%d of %d requests failed; mpirun: %v; the processes' last words:\n%s", failed, n, job.Wait(), grepLines(out, "exiting"))
}

// TestServeMPIProcess is serve in a process launched by mpirun; it skips
// in an ordinary test run.
func TestServeMPIProcess(t *testing.T) {
	if mpitest.Mode() != "serve" {
		t.Skip("run by TestServeMPIKilledRank under mpirun")
	}
	rank := os.Getenv("OMPI_COMM_WORLD_RANK")
	pidFile := filepath.Join(os.Getenv("GEARBOX_TEST_PID_DIR"), "rank-"+rank+".pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve"}, strings.Fields(os.Getenv("GEARBOX_TEST_SERVE_ARGS"))...)
	if err := run(context.Background(), args, os.Stdout, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitHealthy(t *testing.T, base string, job *mpitest.Job) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-job.Done():
			t.Fatalf("the job exited before serving:\n%s", job.Output())
		default:
		}
		if resp, err := http.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no healthy server at %s:\n%s", base, job.Output())
}

func complete(t *testing.T, base, body string) string {
	t.Helper()
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func get(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	return readResponse(t, resp, err)
}

// readResponse is a response's body and status; err is the request's.
func readResponse(t *testing.T, resp *http.Response, err error) (string, int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp.StatusCode
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if regexp.MustCompile(regexp.QuoteMeta(sub)).MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMPIPolicies: over MPI, static and shift run (their placements
// share the KV cache); seesaw, whose phases need a transition, and CSPS,
// an executor of its own, are refused before any process builds its
// executor.
func TestMPIPolicies(t *testing.T) {
	m, err := loadModel("", model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := func(s string) parallel.Plan {
		pl, err := parallel.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	shift, err := policy.NewShift(p("sp=2"), 256)
	if err != nil {
		t.Fatal(err)
	}
	seesaw, err := policy.NewSeesaw(p("pp=2"), p("tp=2"))
	if err != nil {
		t.Fatal(err)
	}
	csps, err := policy.NewCSPS(parallel.Standard(p("sp=2")), 64, m.Config.Hidden, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pol policy.Policy
		ok  bool
	}{{policy.NewStatic(p("tp=2")), true}, {shift, true}, {seesaw, false}, {csps, false}} {
		err := mpiPolicy(m.Config, c.pol)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.pol, err, c.ok)
		}
	}
}
