package cpuexec

import (
	"fmt"

	"github.com/gearboxlm/gearbox/comm"
)

// Ranks in several processes. With Options.World returning a World whose
// ranks live in several processes (comm's MPI transport, one rank per
// process), every process builds the same executor and runs the same
// steps, and a step runs only the ranks hosted here: their collectives
// meet the other processes' ranks through the transport. Each process
// writes only its ranks' rows of the step's logits (HostedRows says
// which); gathering them is the caller's job (package rankproc). A
// transition, a host KV tier and SiDP's pooled weights need every rank in
// one process and are refused.

// setWorld installs Options.World, building the first World at once to
// learn whether every rank is hosted here.
func (e *Executor) setWorld(opts Options) error {
	e.newWorld = opts.World
	if e.newWorld == nil {
		e.newWorld = func(ranks int) (*comm.World, error) { return comm.NewWorld(ranks) }
		return nil
	}
	ranks := len(opts.Placements[0].Coords)
	w, err := e.newWorld(ranks)
	if err != nil {
		return fmt.Errorf("cpuexec: %w", err)
	}
	if w.Size() != ranks {
		return fmt.Errorf("cpuexec: the world has %d ranks, the placement %s %d", w.Size(), opts.Placements[0], ranks)
	}
	e.world = w
	for r := range ranks {
		if w.Comm(r) == nil {
			e.remote = true
		}
	}
	if !e.remote {
		return nil
	}
	if opts.HostBlocks > 0 {
		return errRemote("a host KV tier")
	}
	for _, p := range opts.Placements {
		if p.FFN.Pooled() {
			return errRemote(fmt.Sprintf("placement %s (SiDP's pooled FFN weights)", p))
		}
	}
	return nil
}

// errRemote refuses what needs every rank in this process.
func errRemote(what string) error {
	return fmt.Errorf("cpuexec: %s needs every rank in one process; this executor's ranks are in several", what)
}

// HostedRows returns the rows of the last step's logits that the ranks
// hosted in this process wrote: all rows with the default World, a
// subset when ranks live in several processes. Valid until the next Step.
func (e *Executor) HostedRows() []int {
	var rows []int
	for _, rk := range e.ranks {
		if e.world != nil && e.world.Comm(rk.id) != nil {
			rows = append(rows, rk.st.outRows...)
		}
	}
	return rows
}
