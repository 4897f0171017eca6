package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/gpu"
)

// Kind is the device family a run is asked to use.
type Kind int

// Device kinds.
const (
	Auto Kind = iota // CUDA when the driver loads, else CPU
	CPU
	CUDA
)

// Device is a parsed --device value.
type Device struct {
	Kind  Kind
	Index int // CUDA device ordinal; 0 for "cuda"
}

// String formats d as ParseDevice accepts it.
func (d Device) String() string {
	switch d.Kind {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda:" + strconv.Itoa(d.Index)
	}
	return "auto"
}

// ParseDevice parses "auto", "cpu", "cuda" (device 0) or "cuda:N".
func ParseDevice(s string) (Device, error) {
	switch s {
	case "auto", "":
		return Device{Kind: Auto}, nil
	case "cpu":
		return Device{Kind: CPU}, nil
	case "cuda":
		return Device{Kind: CUDA}, nil
	}
	if rest, ok := strings.CutPrefix(s, "cuda:"); ok {
		n, err := strconv.Atoi(rest)
		if err == nil && n >= 0 {
			return Device{Kind: CUDA, Index: n}, nil
		}
	}
	return Device{}, fmt.Errorf("gpu: device %q: want auto, cpu, cuda or cuda:N", s)
}

// Choice is the device a run will use.
type Choice struct {
	Device     Device // CPU or CUDA, never Auto
	DriverPath string // the loaded driver library when Device is CUDA
	// Reason is one line for the start-up log saying why this device was
	// chosen.
	Reason string
}

// Resolve turns a requested device into the one to use. "cpu" never probes.
// "cuda" and "cuda:N" return the prober's error when the driver does not
// load. "auto" chooses CUDA device 0 when the driver loads and CPU
// otherwise, with the prober's error in Reason. Resolve does not check that
// device N exists: that needs cuInit, done by the backend.
func Resolve(dev Device, probe gpu.Prober) (Choice, error) {
	switch dev.Kind {
	case CPU:
		return Choice{Device: dev, Reason: "cpu requested"}, nil
	case CUDA:
		path, err := probe.ProbeDriver()
		if err != nil {
			return Choice{}, fmt.Errorf("%s requested: %w", dev, err)
		}
		return Choice{Device: dev, DriverPath: path, Reason: dev.String() + " requested; driver " + path}, nil
	case Auto:
		path, err := probe.ProbeDriver()
		if err != nil {
			return Choice{Device: Device{Kind: CPU}, Reason: "auto: using cpu: " + err.Error()}, nil
		}
		d := Device{Kind: CUDA}
		return Choice{Device: d, DriverPath: path, Reason: "auto: using " + d.String() + "; driver " + path}, nil
	}
	return Choice{}, errors.New("gpu: unknown device kind " + strconv.Itoa(int(dev.Kind)))
}
