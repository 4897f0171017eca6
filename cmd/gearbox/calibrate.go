package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/gearboxlm/gearbox/cmd/gearbox/internal/calibrate"
	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// gpuShapes are the models a GPU validation runs by default: the shapes
// of the Llama-3.2-1B and Llama-3.1-8B models the GPU targets are stated on.
const gpuShapes = "llama-3.2-1b,llama-3.1-8b"

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("calibrate", "calibrate [--device cpu|cuda|cuda:N] [--threads N] [--out FILE] [--quick] [--validate [--profile FILE] [--shapes LIST] [--dtype D] [--quantization int8]]", stderr)
	device := fs.String("device", "cpu", "device to measure: cpu (the CPU engine: float32, bfloat16, float16 and Q8_0 weights), or cuda or cuda:N (a GPU under the CUDA executor, bfloat16)")
	threads := fs.Int("threads", 0, "CPU threads for the kernels, as gearbox serve's --threads (default: all cores); --device cpu only")
	out := fs.String("out", "", "write the profile here (default cpu-profile.json, or gpu-profile.json for a GPU)")
	quick := fs.Bool("quick", false, "measure a smaller grid with fewer repetitions (a few seconds instead of about 35 on the CPU)")
	validate := fs.Bool("validate", false, "then check the simulator against the engine with the profile: a step-time sweep and a 200-request serving run; prints Markdown tables")
	profile := fs.String("profile", "", "with --validate: validate this profile instead of measuring a new one")
	dtype := fs.String("dtype", "float32", "with --validate on the CPU: the format the engine holds the weight matrices in, float32, bfloat16 or float16, priced with the profile's GEMM curve for it")
	quant := fs.String("quantization", "", "with --validate on the CPU: int8 holds the matrices in Q8_0 instead (serve's --quantization int8), priced with the profile's Q8_0 GEMM curve")
	shapes := fs.String("shapes", "", "with --validate: comma-separated model shapes to run ("+strings.Join(calibrate.ModelShapes(), ", ")+
		"; default calibrate.ValidationShape on the CPU, "+gpuShapes+" on a GPU)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("calibrate: unexpected argument %q", fs.Arg(0))
	}
	dev, err := ParseDevice(strings.ToLower(*device))
	if err != nil || dev.Kind == Auto {
		return fmt.Errorf("calibrate: unknown --device %q (want cpu, cuda or cuda:N)", *device)
	}
	onGPU := dev.Kind == CUDA
	if *profile != "" && !*validate {
		return errors.New("calibrate: --profile names a profile to validate; add --validate")
	}
	if *shapes != "" && !*validate {
		return errors.New("calibrate: --shapes picks the models to validate on; add --validate")
	}
	weights, err := validationFormat(*dtype, *quant, *validate, onGPU)
	if err != nil {
		return err
	}
	if onGPU && *threads != 0 {
		return errors.New("calibrate: --threads sets CPU kernel threads; a GPU has none")
	}
	models, err := validationModels(*shapes, onGPU)
	if err != nil {
		return err
	}
	var cache *gpu.KernelCache
	if onGPU {
		if cache, err = kernelCache(); err != nil {
			fmt.Fprintf(stderr, "calibrate: kernel cache disabled: %v\n", err)
		}
	}

	var p *sim.Profile
	if *profile != "" {
		if p, err = sim.LoadProfile(*profile); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		if p.IsGPU() != onGPU {
			want := "cpu"
			if p.IsGPU() {
				want = "cuda"
			}
			return fmt.Errorf("calibrate: %s is a profile of %s; validate it with --device %s", *profile, p.Name, want)
		}
	} else {
		if onGPU {
			p, err = calibrate.MeasureGPU(ctx, calibrate.GPUOptions{Device: dev.Index, Quick: *quick, KernelCache: cache, Log: stderr})
		} else {
			p, err = calibrate.Measure(ctx, calibrate.Options{Threads: *threads, Quick: *quick, Log: stderr})
		}
		if err != nil {
			return err
		}
		path := *out
		switch {
		case path != "":
		case onGPU:
			path = "gpu-profile.json"
		default:
			path = "cpu-profile.json"
		}
		if err := p.Save(path); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", path)
	}
	if err := calibrate.WriteProfile(stdout, p); err != nil {
		return err
	}
	if !*validate {
		return nil
	}
	v := validation{p: p, threads: *threads, weights: weights, models: models, stdout: stdout, stderr: stderr}
	if onGPU {
		if err := v.onGPU(dev.Index, cache); err != nil {
			return err
		}
	}
	return v.run(ctx)
}

// validationFormat resolves --dtype: the format of the CPU engine's
// matrices in a validation. Anything but float32 needs --validate and
// the CPU (a GPU is validated in its profile's bfloat16).
func validationFormat(dtype, quantization string, validate, onGPU bool) (tensor.DType, error) {
	d, err := model.ParseDType(dtype)
	if err != nil || d == model.DTypeAuto {
		return 0, fmt.Errorf("calibrate: --dtype %q: want float32, bfloat16 or float16", dtype)
	}
	q, err := model.ParseQuantization(quantization)
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	if q == model.Int8 {
		if d != model.Float32 {
			return 0, fmt.Errorf("calibrate: --quantization int8 with --dtype %s: the engine quantizes float32 values", dtype)
		}
		if !validate || onGPU {
			return 0, errors.New("calibrate: --quantization int8 picks the CPU engine's weight format of a validation; add --validate, on --device cpu")
		}
		return tensor.Q8_0, nil
	}
	if d == model.Float32 {
		return tensor.F32, nil
	}
	if !validate {
		return 0, errors.New("calibrate: --dtype picks the weight format of a validation; add --validate (a profile measures every format)")
	}
	if onGPU {
		return 0, errors.New("calibrate: --dtype: a GPU is validated in its profile's bfloat16")
	}
	return d.Tensor(), nil
}

// validationModel is one model a validation runs: a named real shape, or
// (config nil) calibrate.ValidationShape.
type validationModel struct {
	name   string
	config *model.Config
}

// validationModels resolves --shapes.
func validationModels(list string, onGPU bool) ([]validationModel, error) {
	if list == "" {
		if !onGPU {
			return []validationModel{{name: "ValidationShape"}}, nil
		}
		list = gpuShapes
	}
	var out []validationModel
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		cfg, err := calibrate.ModelShape(name)
		if err != nil {
			return nil, err
		}
		out = append(out, validationModel{name: name, config: cfg})
	}
	return out, nil
}

// validation is what runValidation compares: the profile against the
// engine on each model, and on a GPU against the catalog entry too.
type validation struct {
	p       *sim.Profile
	threads int
	weights tensor.DType // the CPU engine's matrices
	models  []validationModel
	runners calibrate.Runners // nil: the CPU engine
	catalog *sim.GPU          // the catalog entry of the GPU validated on
	device  string            // that GPU's name
	stdout  io.Writer
	stderr  io.Writer
}

// onGPU sets the validation up on CUDA device ordinal: its executors, and
// the catalog entry of the GPU found there.
func (v *validation) onGPU(ordinal int, cache *gpu.KernelCache) error {
	name, err := calibrate.GPUName(ordinal)
	if err != nil {
		return err
	}
	v.device, v.runners = name, calibrate.GPURunners(ordinal, cache)
	if name != v.p.Name {
		fmt.Fprintf(v.stderr, "calibrate: validating a profile of %s on %s\n", v.p.Name, name)
	}
	if c, ok := sim.MatchGPU(name); ok {
		v.catalog = &c
		fmt.Fprintf(v.stdout, "\nCatalog entry of %s: %s (predicted in the catalog columns, no calibration).\n", name, c.Name)
	} else {
		fmt.Fprintf(v.stdout, "\nNo catalog entry matches %q: the tables have the profile's predictions only.\n", name)
	}
	return nil
}

// run prints the step-time sweep of every model, a summary over them,
// and the serving comparison of every model.
func (v *validation) run(ctx context.Context) error {
	var sweeps []calibrate.ShapeSteps
	for _, m := range v.models {
		label := v.label(m)
		fmt.Fprintf(v.stderr, "step-time sweep on %s\n", label)
		steps, err := calibrate.ValidateSteps(ctx, v.p, calibrate.StepOptions{
			Threads: v.threads, Model: m.config, Runners: v.runners, Catalog: v.catalog, Weights: v.weights, Log: v.stderr,
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(v.stdout, "\nStep times (%s):\n\n", label)
		if err := calibrate.WriteStepTable(v.stdout, steps); err != nil {
			return err
		}
		sweeps = append(sweeps, calibrate.ShapeSteps{Name: m.name, Results: steps})
		debug.FreeOSMemory() // a real shape's float32 weights are tens of GB; let the next model have them
	}
	if len(sweeps) > 1 {
		fmt.Fprintf(v.stdout, "\nStep times, all models:\n\n")
		if err := calibrate.WriteStepSummary(v.stdout, sweeps); err != nil {
			return err
		}
	}
	for _, m := range v.models {
		fmt.Fprintf(v.stderr, "serving 200 requests of %s for real, then in simulation\n", v.label(m))
		serve, err := calibrate.ValidateServe(ctx, v.p, calibrate.ServeOptions{Threads: v.threads, Model: m.config, Runners: v.runners, Weights: v.weights})
		if err != nil {
			return err
		}
		fmt.Fprintf(v.stdout, "\nServing %d requests of %s (%s), all at once:\n\n", serve.Requests, serve.Dataset, serve.Shape)
		if err := calibrate.WriteServeTable(v.stdout, serve); err != nil {
			return err
		}
		debug.FreeOSMemory()
	}
	return nil
}

// label describes a model of the validation, and the GPU it runs on.
func (v *validation) label(m validationModel) string {
	s := m.name + ": " + calibrate.ValidationShape.String()
	if m.config != nil {
		s = m.name
	}
	if v.device != "" {
		s += " on " + v.device
	}
	return s
}
