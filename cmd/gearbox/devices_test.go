package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/gpu"
)

func TestParseDevice(t *testing.T) {
	tests := []struct {
		in   string
		want Device
		ok   bool
	}{
		{"auto", Device{Kind: Auto}, true},
		{"", Device{Kind: Auto}, true},
		{"cpu", Device{Kind: CPU}, true},
		{"cuda", Device{Kind: CUDA}, true},
		{"cuda:0", Device{Kind: CUDA}, true},
		{"cuda:3", Device{Kind: CUDA, Index: 3}, true},
		{"cuda:", Device{}, false},
		{"cuda:-1", Device{}, false},
		{"cuda:x", Device{}, false},
		{"gpu", Device{}, false},
		{"CUDA", Device{}, false},
	}
	for _, tc := range tests {
		got, err := ParseDevice(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDevice(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, s := range []string{"auto", "cpu", "cuda:0", "cuda:7"} {
		d, err := ParseDevice(s)
		if err != nil || d.String() != s {
			t.Errorf("round trip %q = %q, %v", s, d.String(), err)
		}
	}
}

type fakeProber struct {
	path  string
	err   error
	calls int
}

func (f *fakeProber) ProbeDriver() (string, error) {
	f.calls++
	return f.path, f.err
}

func TestResolve(t *testing.T) {
	notFound := errors.Join(gpu.ErrNotFound, errors.New("looked in: /usr/local/nvidia/lib64"))
	found := "/usr/local/nvidia/lib64/libcuda.so.1"
	tests := []struct {
		name      string
		dev       Device
		probe     *fakeProber
		want      Device
		wantErr   error
		reason    string
		probeRuns int
	}{
		{"cpu never probes", Device{Kind: CPU}, &fakeProber{path: found}, Device{Kind: CPU}, nil, "cpu requested", 0},
		{"auto with driver", Device{Kind: Auto}, &fakeProber{path: found}, Device{Kind: CUDA}, nil, "auto: using cuda:0; driver " + found, 1},
		{"auto without driver", Device{Kind: Auto}, &fakeProber{err: notFound}, Device{Kind: CPU}, nil, "/usr/local/nvidia/lib64", 1},
		{"cuda:2 with driver", Device{Kind: CUDA, Index: 2}, &fakeProber{path: found}, Device{Kind: CUDA, Index: 2}, nil, "cuda:2 requested", 1},
		{"cuda without driver", Device{Kind: CUDA}, &fakeProber{err: notFound}, Device{}, gpu.ErrNotFound, "", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Resolve(tc.dev, tc.probe)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "cuda:0 requested") {
					t.Errorf("err %q does not say what was requested", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Device != tc.want || !strings.Contains(c.Reason, tc.reason) {
				t.Errorf("Choice = %+v, want device %v, reason containing %q", c, tc.want, tc.reason)
			}
			if c.Device.Kind == CUDA && c.DriverPath != found {
				t.Errorf("DriverPath = %q", c.DriverPath)
			}
			if tc.probe.calls != tc.probeRuns {
				t.Errorf("probe ran %d times, want %d", tc.probe.calls, tc.probeRuns)
			}
		})
	}
	if _, err := Resolve(Device{Kind: Kind(9)}, &fakeProber{}); err == nil {
		t.Error("unknown kind accepted")
	}
}

// TestResolveBrokenDriver: auto on a driver that is found but fails to
// load uses the CPU and says why.
func TestResolveBrokenDriver(t *testing.T) {
	c, err := Resolve(Device{Kind: Auto}, &fakeProber{err: errors.New("gpu: load libcuda.so.1: wrong ELF class")})
	if err != nil || c.Device.Kind != CPU || !strings.Contains(c.Reason, "wrong ELF class") {
		t.Fatalf("auto on a broken driver = %+v, %v", c, err)
	}
}

func TestRealProberOnThisHost(t *testing.T) {
	// Exercises the purego dlopen path where a driver exists and the
	// not-found path where none does; both must give a usable Choice.
	c, err := Resolve(Device{Kind: Auto}, gpu.NewSystemProber())
	if err != nil {
		t.Fatal(err)
	}
	if c.Reason == "" {
		t.Error("empty reason")
	}
	t.Logf("auto resolved to %s: %s", c.Device, c.Reason)
}
