package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// startServeProcess builds the gearbox binary and runs "gearbox serve" on a
// free loopback port; it returns the base URL.
func startServeProcess(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gearbox")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--port", "0"}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		re := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(60 * time.Second):
		t.Fatal("gearbox serve did not start")
	}
	return ""
}

// TestOpenAINodeClient runs the official openai npm client against a real
// gearbox serve process (server/testdata/fetch.sh installs it; .ci/run
// does).
func TestOpenAINodeClient(t *testing.T) {
	script := filepath.Join("..", "..", "server", "testdata", "openai_client.mjs")
	if _, err := os.Stat(filepath.Join("..", "..", "server", "testdata", "npm", "node_modules", "openai")); err != nil {
		t.Skip("openai npm client not installed: run server/testdata/fetch.sh")
	}
	if testing.Short() {
		t.Skip("builds and starts the server")
	}
	url := startServeProcess(t)
	out, err := exec.Command("node", script, url, "stories260K").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("openai client: %v", err)
	}
}
