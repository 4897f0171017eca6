package cpuexec

import (
	"fmt"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/lora"
)

// setAdapters installs the adapters of Options as ids 1, 2, ….
func (e *Executor) setAdapters(adapters []*lora.Adapter) error {
	for i, a := range adapters {
		if err := e.SetAdapter(i+1, a); err != nil {
			return err
		}
	}
	return nil
}

// SetAdapter installs LoRA adapter a as id (1 up to one past the last
// id), replacing the one there; a nil a frees the id, whose sequences
// must have ended. It waits for a running step to end. Every placement
// the rank program runs takes adapters (each rank applies its slice of an
// update where it holds the slice of the weight), but SiDP's pooled MLP,
// whose owners compute other ranks' rows, and ranks in other processes,
// which hold no adapters, do not.
func (e *Executor) SetAdapter(id int, a *lora.Adapter) error {
	if a != nil {
		if e.remote {
			return fmt.Errorf("cpuexec: LoRA adapters need every rank in this process")
		}
		for _, h := range e.held {
			if h.placement.FFN.Pooled() {
				return fmt.Errorf("cpuexec: placement %s pools the MLP weights (SiDP), which does not run LoRA adapters", h.placement)
			}
		}
		if len(a.Layers) != e.cfg.Layers {
			return fmt.Errorf("cpuexec: adapter %s has %d layers, the model %d", a.Name, len(a.Layers), e.cfg.Layers)
		}
		for l := range a.Layers {
			for m, u := range a.Layers[l] {
				if out, in := lora.Module(m).Shape(e.cfg); u != nil && (u.Out != out || u.In != in) {
					return fmt.Errorf("cpuexec: adapter %s: layer %d %s is %d×%d, the model's %d×%d", a.Name, l, lora.Module(m), u.Out, u.In, out, in)
				}
			}
		}
	}
	e.adMu.Lock()
	defer e.adMu.Unlock()
	switch {
	case id < 1 || id > len(e.adapters)+1:
		return fmt.Errorf("cpuexec: LoRA adapter id %d outside [1, %d]", id, len(e.adapters)+1)
	case id == len(e.adapters)+1:
		e.adapters = append(e.adapters, a)
	default:
		e.adapters[id-1] = a
	}
	if a != nil {
		e.maxRank = max(e.maxRank, a.Rank)
	}
	return nil
}

// HasAdapter reports whether LoRA adapter id is installed
// (engine.AdapterRunner).
func (e *Executor) HasAdapter(id int) bool {
	e.adMu.RLock()
	defer e.adMu.RUnlock()
	return id >= 1 && id <= len(e.adapters) && e.adapters[id-1] != nil
}

// checkAdapters refuses a batch naming an adapter the executor lacks.
// Called with adMu read-locked.
func (e *Executor) checkAdapters(b *forward.Batch) error {
	for i, s := range b.Seqs {
		if s.Adapter != 0 && (s.Adapter < 0 || s.Adapter > len(e.adapters) || e.adapters[s.Adapter-1] == nil) {
			return fmt.Errorf("cpuexec: sequence %d names LoRA adapter %d, which the executor does not hold", i, s.Adapter)
		}
	}
	return nil
}

// lora adds the updates of module m of layer l to the rank's real rows
// whose sequences have an adapter: x holds the module's input rows as the
// rank has them (stride xs), y its output rows (stride ys).
func (rk *rank) lora(l int, m lora.Module, y []float32, ys int, x []float32, xs int) {
	e, st := rk.e, &rk.st
	inLo, inN, outLo, outN := rk.loraSpans(m)
	grow(&st.loraT, st.real*e.maxRank)
	e.pool.Run(st.real, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a := rk.mb.seqs[st.tokSeq[st.first+i]].Adapter
			if a == 0 {
				continue
			}
			if u := e.adapters[a-1].Layers[l][m]; u != nil {
				u.Apply(y[i*ys:i*ys+outN], x[i*xs:i*xs+inN], inLo, outLo, st.loraT[i*e.maxRank:(i+1)*e.maxRank])
			}
		}
	})
}

// loraSpans is the part of module m the rank holds under its shard: the
// input columns [inLo, inLo+inN) and output rows [outLo, outLo+outN), as
// parallel.NewShard cuts the weights (q, k, v, gate and up by rows: the
// TP slice's heads and intermediate columns; o and down by columns).
func (rk *rank) loraSpans(m lora.Module) (inLo, inN, outLo, outN int) {
	sh, d, h := rk.sh, rk.e.cfg.HeadDim, rk.e.cfg.Hidden
	qLo, qN := sh.Slice.QLo*d, (sh.Slice.QHi-sh.Slice.QLo)*d
	switch m {
	case lora.Q:
		return 0, h, qLo, qN
	case lora.K, lora.V:
		return 0, h, sh.Slice.KVLo * d, (sh.Slice.KVHi - sh.Slice.KVLo) * d
	case lora.O:
		return qLo, qN, 0, h
	case lora.Gate, lora.Up:
		return 0, h, sh.Inter.Lo, sh.Inter.Len()
	}
	return sh.Inter.Lo, sh.Inter.Len(), 0, h // down
}
