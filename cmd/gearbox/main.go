// Command gearbox is an LLM inference engine and server whose parallel
// layout can change at run time. Subcommands:
//
//	gearbox serve      serve an OpenAI-compatible API
//	gearbox generate   generate text from a prompt
//	gearbox bench      load-test an OpenAI-compatible server
//	gearbox simulate   simulate serving on a GPU node
//	gearbox plan       rank layouts for a workload by simulation
//	gearbox reproduce  rerun a paper's experiments in the simulator
//	gearbox calibrate  measure the CPU or a GPU for the simulator
//	gearbox inspect    describe a model directory
//
// Run "gearbox COMMAND --help" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "serve an OpenAI-compatible API (completions, chat, models, metrics)", runServe},
	{"generate", "generate text from a prompt on the CPU", runGenerate},
	{"bench", "load-test an OpenAI-compatible server: bench serve replays a trace and reports vLLM's serving metrics", runBench},
	{"simulate", "simulate serving a workload on a GPU node with the real scheduler and a calibrated cost model", runSimulate},
	{"plan", "rank every parallel layout and policy of a node for a workload and SLOs, by simulation", runPlan},
	{"reproduce", "rerun a paper's experiments in the simulator and compare (reproduce shift)", runReproduce},
	{"calibrate", "measure this CPU, or a GPU with --device cuda, for the simulator (writes a profile); --validate checks the simulator against the engine", runCalibrate},
	{"inspect", "print a model's architecture, parameters, bytes per dtype and KV bytes per token", runInspect},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "gearbox:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: gearbox COMMAND [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'gearbox COMMAND --help' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gearbox %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
