package sample

// penalties is the per-sequence state behind the repetition, frequency and
// presence penalties: one entry per distinct token that a penalty touches
// (prompt tokens when the repetition penalty is on, generated tokens when
// any penalty is on). Applying them costs O(entries), never O(vocabulary).
type penalties struct {
	rep   float32 // repetition penalty; 1 means off
	freq  float32 // frequency penalty; 0 means off
	pres  float32 // presence penalty; 0 means off
	track bool    // whether any penalty is on, so tokens must be recorded

	index   map[int32]int32 // token → position in entries
	entries []penEntry
	saved   []float32 // logits as they were before apply, parallel to entries
}

// penEntry is one token a penalty applies to.
type penEntry struct {
	tok    int32
	gen    int32 // times generated (Sample or Accept)
	prompt bool  // in the prompt; only recorded when rep != 1
}

func newPenalties(rep, freq, pres float32, prompt []int) penalties {
	p := penalties{rep: rep, freq: freq, pres: pres}
	p.track = rep != 1 || freq != 0 || pres != 0
	if !p.track {
		return p
	}
	p.index = make(map[int32]int32)
	if rep != 1 {
		for _, t := range prompt {
			p.entry(int32(t)).prompt = true
		}
	}
	return p
}

// entry returns the entry for tok, adding it if needed.
func (p *penalties) entry(tok int32) *penEntry {
	i, ok := p.index[tok]
	if !ok {
		i = int32(len(p.entries))
		p.index[tok] = i
		p.entries = append(p.entries, penEntry{tok: tok})
	}
	return &p.entries[i]
}

// record counts one more generation of tok.
func (p *penalties) record(tok int) {
	if p.track {
		p.entry(int32(tok)).gen++
	}
}

// apply penalises logits in place, in vLLM's order: the repetition penalty
// over prompt ∪ generated tokens (a positive logit is divided by it, any
// other multiplied), then logit -= freq·count and logit -= pres for every
// generated token. All arithmetic is float32, as in vLLM. The logits it
// overwrites are saved for restore.
func (p *penalties) apply(logits []float32) {
	p.saved = p.saved[:0]
	for _, e := range p.entries {
		x := logits[e.tok]
		p.saved = append(p.saved, x)
		if p.rep != 1 {
			if x > 0 {
				x /= p.rep
			} else {
				x *= p.rep
			}
		}
		if e.gen > 0 {
			x -= p.freq * float32(e.gen)
			x -= p.pres
		}
		logits[e.tok] = x
	}
}

// restore undoes the last apply.
func (p *penalties) restore(logits []float32) {
	for i, x := range p.saved {
		logits[p.entries[i].tok] = x
	}
}
