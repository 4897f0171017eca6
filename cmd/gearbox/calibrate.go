package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gearboxlm/gearbox/calibrate"
	"github.com/gearboxlm/gearbox/sim"
)

// errNoGPUBackend is what calibrate says for a GPU device.
var errNoGPUBackend = errors.New("calibrate: --device cuda: the GPU backend is not built yet, so there is no GPU engine to measure; " +
	"calibrate the CPU engine with --device cpu, or simulate GPUs from the catalog (gearbox simulate --hardware 8xH200)")

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("calibrate", "calibrate [--device cpu] [--threads N] [--out FILE] [--quick] [--validate [--profile FILE]]", stderr)
	device := fs.String("device", "cpu", "device to measure: cpu (cuda: the GPU backend is not built yet)")
	threads := fs.Int("threads", 0, "CPU threads for the kernels, as gearbox serve's --threads (default: all cores)")
	out := fs.String("out", "cpu-profile.json", "write the profile here")
	quick := fs.Bool("quick", false, "measure a smaller grid with fewer repetitions (a few seconds instead of about 20)")
	validate := fs.Bool("validate", false, "then check the simulator against the CPU engine with the profile: a step-time sweep and a 200-request serving run (about a minute on two cores); prints Markdown tables")
	profile := fs.String("profile", "", "with --validate: validate this profile instead of measuring a new one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("calibrate: unexpected argument %q", fs.Arg(0))
	}
	switch strings.ToLower(*device) {
	case "cpu":
	case "cuda", "gpu":
		return errNoGPUBackend
	default:
		return fmt.Errorf("calibrate: unknown --device %q (want cpu)", *device)
	}
	if *profile != "" && !*validate {
		return errors.New("calibrate: --profile names a profile to validate; add --validate")
	}

	var p *sim.Profile
	if *profile != "" {
		var err error
		if p, err = sim.LoadProfile(*profile); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
	} else {
		var err error
		p, err = calibrate.Measure(ctx, calibrate.Options{Threads: *threads, Quick: *quick, Log: stderr})
		if err != nil {
			return err
		}
		if err := p.Save(*out); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", *out)
	}
	if err := calibrate.WriteProfile(stdout, p); err != nil {
		return err
	}
	if !*validate {
		return nil
	}
	return runValidation(ctx, p, *threads, stdout, stderr)
}

// runValidation prints the step-time sweep and the serving comparison.
func runValidation(ctx context.Context, p *sim.Profile, threads int, stdout, stderr io.Writer) error {
	fmt.Fprintf(stderr, "step-time sweep on %s\n", calibrate.ValidationShape)
	steps, err := calibrate.ValidateSteps(ctx, p, calibrate.StepOptions{Threads: threads, Log: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nStep times (%s):\n\n", calibrate.ValidationShape)
	if err := calibrate.WriteStepTable(stdout, steps); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "serving 200 requests for real, then in simulation")
	serve, err := calibrate.ValidateServe(ctx, p, calibrate.ServeOptions{Threads: threads})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nServing %d requests of %s (%s), all at once:\n\n", serve.Requests, serve.Dataset, serve.Shape)
	return calibrate.WriteServeTable(stdout, serve)
}
